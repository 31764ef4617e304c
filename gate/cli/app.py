"""The command line's base: the root group ``gate``, what every command gets (:class:`App`), and output.

Each command group lives in a module of its own (sandbox, channel, source, run, consume) that imports
this one; gate/cli/__init__.py adds them to :func:`main`. Commands parse their options, call the
layer that does the work, and print the result as an aligned table, or as JSON with ``gate --json``.
A :class:`GateError` becomes one ``error: ...`` message on stderr and the error's exit status; never
a traceback.
"""

from __future__ import annotations

import functools
import importlib
import json
import sys
from collections.abc import Callable, Sequence
from dataclasses import asdict
from typing import TYPE_CHECKING, Any, TypeVar

import click
import pymysql

from gate.common.config import Config, ServerConfig, load_config
from gate.common.dc import GATE_VERSION
from gate.common.errors import GateError, NotConfirmed, PreflightFailed, ServerRefused
from gate.common.retry import is_transient
from gate.common.tls import MODES

if TYPE_CHECKING:
    from gate.admin.preflight import Problem

F = TypeVar("F", bound=Callable[..., Any])


class App:
    """What every command gets: the config (loaded on first use) and the output mode."""

    def __init__(self, config_path: str | None, as_json: bool) -> None:
        self.config_path = config_path
        self.as_json = as_json

    @functools.cached_property
    def config(self) -> Config:
        return load_config(self.config_path)

    @property
    def dc(self) -> ServerConfig:
        return self.config.dc

    def emit(self, data: Any, text: str) -> None:
        """Print ``data`` as JSON with --json, else the readable ``text``."""
        click.echo(json.dumps(data, indent=2, default=str) if self.as_json else text)


pass_app = click.make_pass_decorator(App)


def login_options(role: str, prefix: str = "", keeps: bool = False, stored: bool = True) -> Callable[[F], F]:
    """The options --[prefix-]user, --[prefix-]password and --[prefix-]password-env of one server."""
    dash, under = (f"{prefix}-", f"{prefix}_") if prefix else ("", "")
    default = "keep the current one" if keeps else "root"
    password = "stored in the channel as given" if stored else "given on the command line"
    reference = "the channel stores only the reference ${VAR}, read whenever gate connects" if stored else "read now"
    options = [
        click.option(f"--{dash}user", f"{under}user", metavar="USER",
                     help=f"user gate logs in to the {role} as [default: {default}]"),
        click.option(f"--{dash}password", f"{under}password", metavar="PASSWORD",
                     help=f"{role} password, {password} (prefer --{dash}password-env)"),
        click.option(f"--{dash}password-env", f"{under}password_env", metavar="VAR",
                     help=f"environment variable holding the {role} password; {reference}"),
    ]

    def decorate(command: F) -> F:
        for option in reversed(options):
            command = option(command)
        return command

    return decorate


def tls_options(role: str, prefix: str = "") -> Callable[[F], F]:
    """The options --[prefix-]tls-mode, --[prefix-]tls-ca, --[prefix-]tls-cert and --[prefix-]tls-key of one
    server; what is not given stays as it was (a new channel: channel_defaults.tls)."""
    dash, under = (f"{prefix}-", f"{prefix}_") if prefix else ("", "")
    options = [
        click.option(f"--{dash}tls-mode", f"{under}tls_mode", type=click.Choice(MODES),
                     help=f"TLS to the {role}: disabled, preferred (encrypt if offered), required (encrypt, verify "
                          "nothing), verify-ca, verify-identity (also the host name)"),
        click.option(f"--{dash}tls-ca", f"{under}tls_ca", metavar="FILE",
                     help=f"CA certificate (PEM) the {role}'s certificate must be signed by ('' removes it)"),
        click.option(f"--{dash}tls-cert", f"{under}tls_cert", metavar="FILE",
                     help=f"client certificate (PEM) for an account REQUIRE X509 on the {role} ('' removes it)"),
        click.option(f"--{dash}tls-key", f"{under}tls_key", metavar="FILE",
                     help="its private key (PEM, readable by its owner only: chmod 600)"),
    ]

    def decorate(command: F) -> F:
        for option in reversed(options):
            command = option(command)
        return command

    return decorate


def warn(problems: Sequence[Problem]) -> None:
    for problem in problems:
        click.echo(f"warning: {problem}", err=True)


def need_terminal(not_done: str, add_yes: str) -> None:
    """Refuse a confirmation that this session has no terminal to ask on."""
    if not (sys.stdin and sys.stdin.isatty()):
        raise NotConfirmed(f"{not_done}: confirmation is needed and this session has no terminal to ask on. {add_yes}")


def cell(value: Any) -> str:
    if value is None or value == [] or value == "":
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, list):
        return ", ".join(map(str, value))
    return str(value)


def table(rows: Sequence[dict[str, Any]], columns: Sequence[str]) -> str:
    """Rows as left-aligned columns under a header line."""
    cells = [list(columns)] + [[cell(row.get(c)) for c in columns] for row in rows]
    widths = [max(len(line[i]) for line in cells) for i in range(len(columns))]
    return "\n".join("  ".join(v.ljust(w) for v, w in zip(line, widths)).rstrip() for line in cells)


def pairs(data: dict[str, Any]) -> str:
    """A nested dict as aligned ``key  value`` lines; nested keys are joined with dots."""

    def flat(prefix: str, value: Any) -> list[tuple[str, str]]:
        if isinstance(value, dict) and value:
            return [item for k, v in value.items() for item in flat(f"{prefix}.{k}" if prefix else k, v)]
        return [(prefix, cell(value))]

    items = flat("", data)
    width = max(len(k) for k, _ in items)
    return "\n".join(f"{k.ljust(width)}  {v}" for k, v in items)


class GateGroup(click.Group):
    """The root group: turns gate's errors (and server errors) into one message and an exit status. Its
    commands are imported when first used (``lazy``: name -> "module:attribute"), so that a command loads
    only its own modules: 'gate run --standby' stands by small (docs/dba/several-hosts.md)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.lazy: dict[str, str] = {}
        super().__init__(*args, **kwargs)

    @property  # type: ignore[override]
    def commands(self) -> dict[str, click.Command]:
        """Every command, each imported."""
        for name in list(self.lazy):
            self._load(name)
        return self._commands

    @commands.setter
    def commands(self, value: dict[str, click.Command]) -> None:
        self._commands = value

    def _load(self, name: str) -> None:
        module, attribute = self.lazy.pop(name).split(":")
        self._commands[name] = getattr(importlib.import_module(module), attribute)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in self.lazy:
            self._load(cmd_name)
        return self._commands.get(cmd_name)

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*self._commands, *self.lazy})

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except GateError as exc:
            click.echo(f"error: {exc}", err=True)
            ctx.exit(exc.exit_code)
        except pymysql.MySQLError as exc:
            click.echo(f"error: a server refused the operation: {exc}", err=True)
            ctx.exit(1 if is_transient(exc) else ServerRefused.exit_code)


@click.group(cls=GateGroup, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.option("--config", "config_path", type=click.Path(dir_okay=False), metavar="PATH",
              help="config file [default: $GATE_CONFIG, else ./config.yaml; built-in defaults if neither exists]")
@click.option("--json", "as_json", is_flag=True, help="print results as JSON instead of tables")
@click.version_option(GATE_VERSION, prog_name="gate")
@click.pass_context
def main(ctx: click.Context, config_path: str | None, as_json: bool) -> None:
    """MySQL/MariaDB change data capture into a DC database.

    gate reads a source server's binary log and writes every row change, DDL statement and TRUNCATE
    into the table transfer_data of a channel database on a DC server, with a checkpoint telling
    readers how far the data is complete. These commands set up and inspect channels, check source
    servers, and run private sandbox servers to try it on.

    Example:

    \b
        gate sandbox up
        gate channel create demo --source 127.0.0.1:33061
        gate --json channel show demo
    """
    ctx.obj = App(config_path, as_json)


def report_checks(app: App, results: list[dict[str, Any]]) -> None:
    """Print preflight results; fail (status 1) if any server has a fatal problem."""
    from gate.admin.preflight import describe_failure, describe_tls

    failed = [r for r in results if any(p.fatal for p in r["problems"])]
    if app.as_json:
        click.echo(json.dumps([{**r, "ok": r not in failed, "problems": [asdict(p) for p in r["problems"]]}
                               for r in results], indent=2))
        if failed:
            click.get_current_context().exit(PreflightFailed.exit_code)
        return
    for result in results:
        warn([p for p in result["problems"] if not p.fatal])
        if result.get("tls"):
            click.echo(f"{result['role']} {result['server']}: {describe_tls(result['tls'])}")
        if result not in failed:
            server_id = result["server_id"]
            click.echo(f"{result['role']} {result['server']}: ready for gate "
                       + ("(server_id not checked: give --server-id)" if server_id is None
                          else f"with server_id {server_id}"))
    if failed:
        raise PreflightFailed("\n".join(
            describe_failure(r["server"], r["role"], [p for p in r["problems"] if p.fatal]) for r in failed))
