"""The documentation site cannot drift from the code: it builds in strict mode, its generated parts come
from the code's definitions, every alert has a runbook entry, the architecture page names every module,
and its examples run (or, for commands that need servers, parse against the real command line)."""

from __future__ import annotations

import ast
import json
import os
import re
import shlex
import subprocess
import sys
import warnings
from pathlib import Path

import click
import pytest
import yaml

from gate.cli import main
from gate.common.dc import ChannelSettings, connect, create_channel
from gate.devtools.sandbox import Sandbox
from gate.devtools.synthetic import SyntheticChannel
from tests.replay import server_config
from tests.test_cli_docs import ALL
from tests.test_layers import ALLOWED

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
PAGES = sorted(DOCS.rglob("*.md"))
sys.path.insert(0, str(ROOT / "scripts" / "docs"))
import gen_tables  # noqa: E402  (the site's build hooks live in scripts/docs/)

_FENCE = re.compile(r"(?:<!-- docs-test: (run|run on a channel|run on a cluster|not run \([^)]+\)) -->\n)?"
                    r"^```(\w*)\n(.*?)^```$", re.M | re.S)


def blocks() -> list[tuple[str, str, str, str]]:
    """(where, marker, language, code) of every fenced block of the pages and README.md."""
    found = []
    for path in [*PAGES, ROOT / "README.md"]:
        text = path.read_text()
        for match in _FENCE.finditer(text):
            line = text[:match.start()].count("\n") + 1
            found.append((f"{path.relative_to(ROOT)}:{line}", match.group(1) or "", match.group(2), match.group(3)))
    return found


BLOCKS = blocks()


def env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT), "NO_MKDOCS_2_WARNING": "1",
            "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}


def test_the_site_builds_in_strict_mode_with_the_generated_parts(tmp_path: Path) -> None:
    built = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(tmp_path)], cwd=ROOT,
                           env=env(), capture_output=True, text=True, timeout=300)
    assert built.returncode == 0 and "WARNING" not in built.stderr, built.stderr
    cli = (tmp_path / "reference" / "cli.html").read_text()
    assert all(f'id="{name.replace(" ", "-")}"' in cli for name in COMMANDS)
    config = (tmp_path / "dba" / "config.html").read_text()
    assert "<td><code>snapshot_chunk_rows</code></td>" in config and "<td>1 to 1,000,000</td>" in config
    assert "<td><code>optype</code></td>" in (tmp_path / "reference" / "dc-format.html").read_text()
    external = [f"{page.name}: {url}" for page in tmp_path.rglob("*.html")
                for url in re.findall(r'(?:src|href)="(https?://[^"]+)"', page.read_text())
                if re.search(r"\.(js|css|woff2?|ttf|png|svg)$|fonts\.|unpkg|analytics", url)]
    assert external == [], "the site must load nothing from the network"
    svg = (tmp_path / "img" / "bench-throughput.svg").read_text()
    assert svg.startswith("<svg") and "a: inserts, 100-row txns" in svg


# --- the command line -----------------------------------------------------------------------------

COMMANDS = [name for name, _ in ALL]
PROSE = "\n".join(p.read_text() for p in PAGES if p != DOCS / "reference" / "cli.md")


@pytest.mark.parametrize("name", COMMANDS)
def test_every_command_is_explained_in_a_guide(name: str) -> None:
    """The generated reference lists every command by itself; the guides must explain each one too."""
    assert re.search(rf"(^|[\s`]){re.escape(name)}(\s|`|$)", PROSE, re.M), f"no guide page shows '{name}'"


def remaining(ctx: click.Context) -> list[str]:
    """The arguments a group left for its subcommand (Click 8 keeps the command name apart)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        return [*getattr(ctx, "protected_args", []), *ctx.args]


def parse(line: str) -> None:
    """Resolve a ``gate ...`` command line against the real CLI, converting every option, running nothing."""
    args = shlex.split(line)[1:]
    ctx = main.make_context("gate", list(args), resilient_parsing=False)
    command: click.Command = main
    while isinstance(command, click.Group) and (rest := remaining(ctx)):
        sub = command.get_command(ctx, rest[0])
        assert sub is not None, f"no command '{rest[0]}' in '{line}'"
        command, ctx = sub, sub.make_context(rest[0], rest[1:], parent=ctx)


def shell_lines(code: str) -> list[str]:
    """The ``gate`` command lines of a shell block: continuations joined, comments and `&` dropped."""
    lines = []
    for line in code.replace("\\\n", " ").splitlines():
        for part in re.split(r"&&|;|\|", re.sub(r"\s+#.*$", "", line)):
            part = part.strip().rstrip("&").strip()
            if part.startswith("gate ") and "--help" not in part:
                lines.append(part)
    return lines


GATE_LINES = [(where, line) for where, _, lang, code in BLOCKS if lang == "sh" for line in shell_lines(code)]


def test_the_pages_show_many_command_lines() -> None:
    assert len(GATE_LINES) >= 60 and any("gate channel create shop" in line for _, line in GATE_LINES)


@pytest.mark.parametrize("where,line", GATE_LINES, ids=[f"{w} {line[:50]}" for w, line in GATE_LINES])
def test_every_command_line_in_the_pages_parses(where: str, line: str) -> None:
    parse(line.replace("CHANNEL", "shop").replace("NAME", "billing"))


def test_a_command_line_with_a_wrong_option_does_not_parse() -> None:
    with pytest.raises(click.NoSuchOption, match="--no-such-option"):
        parse("gate channel create shop --no-such-option")
    with pytest.raises(click.BadParameter):
        parse("gate channel create shop --writers 0")


# --- runnable examples ----------------------------------------------------------------------------

RUN = [(where, lang, code) for where, marker, lang, code in BLOCKS if marker == "run"]


def test_python_and_shell_blocks_are_run_or_say_why_not() -> None:
    """Each is run (a shell recipe 'run on a cluster': tests/test_docs_recipes.py) or says why not."""
    unmarked = [where for where, marker, lang, _ in BLOCKS if lang in ("python", "sh") and not marker]
    assert unmarked == [], "mark each python and sh block '<!-- docs-test: run -->' or '<!-- docs-test: not run (why) -->'"
    misplaced = [where for where, marker, lang, _ in BLOCKS
                 if (marker, lang) in (("run on a channel", "sh"), ("run on a cluster", "python"))]
    assert misplaced == [], "'run on a channel' runs python blocks, 'run on a cluster' shell recipes"
    assert len(RUN) >= 3


@pytest.mark.parametrize("where,lang,code", RUN, ids=[where for where, _, _ in RUN])
def test_runnable_examples_run(where: str, lang: str, code: str, tmp_path: Path) -> None:
    runner = {"sh": ["bash", "-euo", "pipefail", "-c"], "python": [sys.executable, "-c"]}[lang]
    done = subprocess.run([*runner, code], cwd=tmp_path, env=env(), capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, f"{where}:\n{done.stdout}\n{done.stderr}"
    if lang == "sh":
        assert done.stdout.count("Usage: gate") == code.count("--help")


ON_A_CHANNEL = sorted({code for _, marker, _, code in BLOCKS if marker == "run on a channel"})


@pytest.mark.parametrize("code", ON_A_CHANNEL)
def test_examples_on_a_channel_print_its_rows(code: str, sandbox: Sandbox, gate_config: Path, unique_name: str) -> None:
    """Blocks marked 'run on a channel' read the channel "shop": here a channel of the test DC holding two
    transactions, written straight into transfer_data."""
    with connect(server_config(sandbox.dc), "DC") as conn:
        create_channel(conn, ChannelSettings(unique_name, server_config(sandbox.source)))
        SyntheticChannel(conn, unique_name).write([
            [("shop", "orders", "INSERT", {"NEW": [{"id": "1"}, {"v": "a"}]})],
            [("shop", "orders", "UPDATE", {"NEW": [{"id": "1"}, {"v": "b"}], "OLD": [{"id": "1"}, {"v": "a"}]})]])
        conn.commit()
    done = subprocess.run([sys.executable, "-c", code.replace('"shop"', f'"{unique_name}"')], capture_output=True,
                          text=True, env={**env(), "GATE_CONFIG": str(gate_config)}, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["1 1 INSERT shop.orders {'id': '1', 'v': 'a'}",
                                        "2 2 UPDATE shop.orders {'id': '1', 'v': 'b'}"]


@pytest.mark.parametrize("where,lang,code", [(w, lang, c) for w, _, lang, c in BLOCKS if lang in ("yaml", "json")],
                         ids=[w for w, _, lang, _ in BLOCKS if lang in ("yaml", "json")])
def test_yaml_and_json_blocks_parse(where: str, lang: str, code: str) -> None:
    parsed = yaml.safe_load(code) if lang == "yaml" else json.loads(code)
    assert isinstance(parsed, dict) and parsed


# --- alerts and their runbook ---------------------------------------------------------------------

def test_every_alert_has_a_table_row_and_a_runbook_entry_and_nothing_else_does() -> None:
    rules = yaml.safe_load((ROOT / "deploy" / "prometheus" / "gate-rules.yml").read_text())
    alerts = sorted(rule["alert"] for group in rules["groups"] for rule in group["rules"] if "alert" in rule)
    page = (DOCS / "operations" / "alerts.md").read_text()
    table, runbook = page.split("## Runbook")
    assert sorted(re.findall(r"^\| `(\w+)` \|", table, re.M)) == alerts
    assert sorted(re.findall(r"^### (\w+)$", runbook, re.M)) == alerts
    assert len(alerts) == 15


# --- the architecture page ------------------------------------------------------------------------

ARCHITECTURE = (DOCS / "architecture.md").read_text()


def test_the_layout_names_every_module_of_gate_and_nothing_else() -> None:
    layout = re.search(r"^```\n(gate/\n.*?)^dc_schema/", ARCHITECTURE, re.M | re.S)
    assert layout
    named, package = set(), ""
    for line in layout.group(1).splitlines()[1:]:
        if match := re.match(r"^  (\w+)/", line):
            package = match.group(1)
        elif match := re.match(r"^    (\w+)\.py\s", line):
            named.add(f"gate/{package}/{match.group(1)}.py")
    real = {str(p.relative_to(ROOT)) for p in (ROOT / "gate").rglob("*.py") if p.name != "__init__.py"}
    assert sorted(named - real) == [] and sorted(real - named) == []


def test_the_layers_list_is_what_test_layers_allows() -> None:
    block = re.search(r"^```text\n(gate\.cli .*?)^```$", ARCHITECTURE, re.M | re.S)
    assert block
    shown = {}
    for line in block.group(1).splitlines():
        layer, imports = line.split("->")
        shown[layer.strip()] = {name.strip() for name in imports.split(",") if name.strip().startswith("gate")}
    assert shown == {layer: allowed - {layer} for layer, allowed in ALLOWED.items()}


# --- generated parts ------------------------------------------------------------------------------

def test_a_range_in_config_yaml_that_differs_from_the_code_fails_the_build() -> None:
    comments = {"channel_defaults.writers": "concurrent DC connections (1 to 32)"}
    with pytest.raises(gen_tables.DocsDrift, match=r"config.yaml says channel_defaults.writers ranges 1 to 32, "
                                                   r"gate.common.config.LIMITS says 1 to 64: correct the comment."):
        gen_tables.settings(comments)


def test_the_settings_table_takes_types_defaults_and_ranges_from_the_code() -> None:
    text = gen_tables.settings({"channel_defaults.writers": "concurrent DC connections (1 to 64)"})
    assert "| `writers` | whole number | `2` | 1 to 64 | concurrent DC connections |" in text
    assert "| `binary_format` | one of `base64`, `hex` | `base64` |  |  |" in text
    assert "| `password` | password | empty |  |  |" in text


def test_an_unknown_generated_part_fails_the_build() -> None:
    with pytest.raises(gen_tables.DocsDrift, match="unknown generated part 'nothing'"):
        gen_tables.expand("<!-- generated: nothing -->")


# --- the settings table of the DBA's guide --------------------------------------------------------

SETTINGS_SECTION = (DOCS / "dba" / "sources.md").read_text().split("## What the binlog holds")[1]
SETTINGS_ROWS = [[cell.strip() for cell in line.strip("|").split(" | ")]
                 for line in SETTINGS_SECTION.splitlines() if line.startswith("| ")][1:]
CITED = [(row[0], name) for row in SETTINGS_ROWS for name in re.findall(r"`(tests/[^`]+)`", row[3])]


def test_every_row_of_the_settings_table_says_what_gate_does_and_names_a_test() -> None:
    assert len(SETTINGS_ROWS) >= 30 and all(len(row) == 4 for row in SETTINGS_ROWS)
    assert [row[0] for row in SETTINGS_ROWS if not re.match(r"(captured|refused|caveat)\b", row[2])] == []
    assert [row[0] for row in SETTINGS_ROWS if not re.findall(r"`tests/[^`]+`", row[3])] == []


def test_every_case_of_the_source_matrix_is_in_the_settings_table() -> None:
    from tests.test_source_matrix import CASES
    cited = {name for _, name in CITED}
    assert [case.name for case in CASES if f"tests/test_source_matrix.py::test_captured[{case.name}]" not in cited] == []


def _test_exists(name: str) -> bool:
    """Whether ``tests/FILE.py::test_x`` or ``...::test_x[id]`` names a test function of that file (for an id:
    one that appears there as a string, the parameter or pytest id it stands for)."""
    path, _, test = name.partition("::")
    function, _, param = test.partition("[")
    file = ROOT / path
    if not file.is_file():
        return False
    source = file.read_text()
    tree = ast.parse(source)
    defined = {node.name for node in ast.walk(tree) if isinstance(node, ast.FunctionDef)}
    return function in defined and (not param or f'"{param.rstrip("]")}"' in source)


@pytest.mark.parametrize("row,name", CITED, ids=[name for _, name in CITED])
def test_every_test_the_settings_table_names_exists(row: str, name: str) -> None:
    assert _test_exists(name), f"the row {row!r} names {name}, which is no test of tests/"
