"""Markdown the documentation takes from the code's own definitions, so that it cannot drift from them.

A page asks for a part with a marker line, ``<!-- generated: NAME -->`` (:data:`PARTS`), or for a file of
the repository with ``<!-- include: PATH -->`` (its first heading dropped: the page has its own).
:func:`expand` replaces them; a definition the docs state differently (a range in config.yaml's comments
against :data:`gate.common.config.LIMITS`, an optype missing from contract.sql's comment) is a
:class:`DocsDrift`, which fails the build.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import MISSING, fields
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
_MARKER = re.compile(r"<!-- (generated|include): (\S+) -->")
_RANGE = re.compile(r"\s*\(([-\d.]+) to ([-\d.]+)\)")


class DocsDrift(Exception):
    """The documentation and the code it is generated from disagree."""


def _yaml_comments() -> dict[str, str]:
    """``section.key`` -> the comment beside the key in the shipped config.yaml, and ``section`` -> the
    comment block above the section."""
    comments: dict[str, str] = {}
    block: list[str] = []
    section = ""
    for line in (ROOT / "config.yaml").read_text().splitlines():
        if line.startswith("#"):
            block.append(line.lstrip("# ").rstrip())
        elif re.match(r"^\w+:", line):
            section = line.split(":")[0]
            comments[section] = " ".join(block).strip()
            block = []
        elif match := re.match(r"^\s+(\w+):[^#]*(?:#\s*(.*))?$", line):
            comments[f"{section}.{match.group(1)}"] = (match.group(2) or "").strip()
        else:
            block = []
    return comments


def _type_name(kind: Any) -> str:
    text = str(kind)
    if text.startswith("Literal"):
        return "one of " + ", ".join(f"`{v}`" for v in re.findall(r"'([^']*)'", text))
    return {"Secret": "password", "str": "text", "int": "whole number", "float": "number"}.get(text, text)


def _number(value: float) -> str:
    return f"{value:,.0f}" if value == int(value) else f"{value:g}"


def _default(field: Any) -> str:
    value = field.default_factory() if field.default is MISSING else field.default
    text = getattr(value, "as_written", lambda: value)()
    return f"`{text}`" if text != "" else "empty"


def settings(comments: dict[str, str] | None = None) -> str:
    """Every key of config.yaml: type, built-in default and range from gate.common.config, meaning from the
    comments of the shipped config.yaml (or ``comments``, as :func:`_yaml_comments` gives them)."""
    from gate.common.config import LIMITS, Config

    comments = _yaml_comments() if comments is None else comments
    out: list[str] = []
    for section in (f for f in fields(Config) if f.name != "path"):
        out += [f"### `{section.name}`", "", comments.get(section.name, ""), "",
                "| key | type | default | range | meaning |", "| --- | --- | --- | --- | --- |"]
        for field in fields(section.default_factory()):  # type: ignore[misc]
            key = f"{section.name}.{field.name}"
            meaning = comments.get(key, "")
            stated = _RANGE.search(meaning)
            low, high = LIMITS.get(key, (None, None))
            if stated and (float(stated.group(1)), float(stated.group(2))) != (low, high):
                raise DocsDrift(f"config.yaml says {key} ranges {stated.group(1)} to {stated.group(2)}, "
                                f"gate.common.config.LIMITS says {low} to {high}: correct the comment.")
            limits = f"{_number(low)} to {_number(high)}" if low is not None and high is not None else ""
            out.append(f"| `{field.name}` | {_type_name(field.type)} | {_default(field)} | {limits} "
                       f"| {_RANGE.sub('', meaning)} |")
        out.append("")
    return "\n".join(out)


def _columns(ddl: str) -> list[tuple[str, str, str, str]]:
    """(name, type, NULL or NOT NULL, comment) of each column of a CREATE TABLE."""
    found = re.findall(r"^\s+(\w+)\s+([A-Z]+(?:\(\d+\))?(?: UNSIGNED)?)\s+(NOT NULL|NULL)[^\n]*?COMMENT '([^']*)'",
                       ddl, re.M)
    return [(n, t.lower(), null, comment) for n, t, null, comment in found]


def contract() -> str:
    """The DC contract's tables as dc_schema/contract.sql creates them."""
    import dc_schema
    from gate.consume.client import OPTYPES

    out: list[str] = []
    for table in dc_schema.CONTRACT_TABLES:
        ddl = dc_schema.table_ddl(table)
        columns = _columns(ddl)
        keys = re.findall(r"^\s+((?:PRIMARY )?KEY [^\n]*?\([^)]*\))", ddl, re.M)
        out += [f"`{table}`" + (": " + ", ".join(f"`{k.replace('idx_', '')}`" for k in keys) if keys else ""), "",
                "| column | type | null | meaning |", "| --- | --- | --- | --- |"]
        out += [f"| `{n}` | {t} | {'no' if null == 'NOT NULL' else 'yes'} | {c} |" for n, t, null, c in columns]
        out.append("")
        for name, _, _, comment in columns:
            missing = sorted(OPTYPES - set(comment.split())) if name == "optype" else []
            if missing:
                raise DocsDrift(f"contract.sql's comment on transfer_data.optype lacks {', '.join(missing)}.")
    return "\n".join(out)


def optypes() -> str:
    """The optypes gate writes (gate.consume.client), rows first."""
    from gate.consume.client import DML_OPTYPES, OPTYPES, SNAPSHOT_OPTYPES

    order = sorted(DML_OPTYPES) + sorted(OPTYPES - DML_OPTYPES - SNAPSHOT_OPTYPES) + sorted(SNAPSHOT_OPTYPES)
    return ", ".join(f"`{name}`" for name in order)


PARTS: dict[str, Callable[[], str]] = {"settings": settings, "contract": contract, "optypes": optypes}


def include(path: str) -> str:
    """A Markdown file of the repository without its first heading, its other headings one level down
    (they become sections of the including page's section)."""
    lines, fenced = [], False
    for line in re.sub(r"\A#[^\n]*\n+", "", (ROOT / path).read_text()).splitlines():
        fenced ^= line.startswith("```")
        lines.append("#" + line if line.startswith("#") and not fenced else line)
    return "\n".join(lines) + "\n"


def expand(markdown: str) -> str:
    """The page with each marker replaced by its part."""

    def part(match: re.Match[str]) -> str:
        kind, name = match.groups()
        if kind == "include":
            return include(name)
        if name not in PARTS:
            raise DocsDrift(f"unknown generated part {name!r}; the parts are {', '.join(PARTS)}.")
        return PARTS[name]()

    return _MARKER.sub(part, markdown)
