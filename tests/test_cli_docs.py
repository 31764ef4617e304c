"""Every command of the CLI gives an example in its --help. (That the documentation explains every command
is checked against the guide pages by tests/test_docs.py; the command-line reference is generated.)"""

from __future__ import annotations

import re
from collections.abc import Iterator

import click
import pytest

from gate.cli import main


def commands(group: click.Group, prefix: str = "gate") -> Iterator[tuple[str, click.Command]]:
    """(full name, command) of every leaf command, e.g. ('gate channel create', ...)."""
    for name, command in sorted(group.commands.items()):
        full = f"{prefix} {name}"
        if isinstance(command, click.Group):
            yield from commands(command, full)
        else:
            yield full, command


ALL = list(commands(main))


def test_the_cli_has_the_commands_this_test_walks() -> None:
    assert len(ALL) >= 20 and ("gate run" in dict(ALL)) and ("gate channel create" in dict(ALL))


@pytest.mark.parametrize("name,command", ALL, ids=[name for name, _ in ALL])
def test_every_command_help_has_an_example(name: str, command: click.Command) -> None:
    text = re.sub(r"gate(\s+--(json|config\s+\S+))+", "gate", command.help or "")  # global options may come first
    assert name in text, f"'{name} --help' shows no example of the command"
