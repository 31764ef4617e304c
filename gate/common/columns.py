"""Column rules: exclude, mask, hash or truncate columns of captured tables before they reach the DC.

A rule names columns by a ``db.table.column`` pattern (``*`` and ``?`` wildcards, case-sensitive, as
table patterns). Every rule matching a column applies to it, in the channel's order; an ``exclude``
among them removes the column. Values are transformed after rendering to text, binary values before
their base64/hex encoding; NULL stays NULL.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Any

from gate.common.errors import InvalidValue, MissingSecret

KINDS = ("exclude", "mask", "hash", "truncate")
MASK = "***"  # what a masked value becomes
# one name of a pattern: the characters of unquoted MariaDB identifiers (letters of any alphabet, U+0080 to
# U+FFFF) and the wildcards
NAME = r"[0-9A-Za-z_$*?\u0080-\uffff]+"
_PATTERN = re.compile(rf"{NAME}\.{NAME}\.{NAME}")
_LENGTH = re.compile(r"[0-9]+")
MAX_LENGTH = 2**32 - 1  # the longest value a column holds (LONGTEXT, LONGBLOB)
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

Value = str | bytes
Transform = Callable[[Value], Value]


@dataclass(frozen=True)
class ColumnRule:
    """One rule; ``key_env`` names the environment variable holding a hash rule's key (never the key)."""

    kind: str
    pattern: str
    key_env: str | None = None
    length: int | None = None

    def matches(self, db: str, table: str, column: str) -> bool:
        return fnmatchcase(f"{db}.{table}.{column}", self.pattern)

    def describe(self) -> str:
        """The rule as 'gate channel columns' takes it."""
        if self.kind == "truncate":
            return f"--truncate '{self.pattern}={self.length}'"
        if self.kind == "hash":
            return f"--hash '{self.pattern}' (key in ${self.key_env})"
        return f"--{self.kind} '{self.pattern}'"

    def as_row(self) -> dict[str, Any]:
        row: dict[str, Any] = {"rule": self.kind, "pattern": self.pattern}
        if self.key_env is not None:
            row["key_env"] = self.key_env
        if self.length is not None:
            row["length"] = self.length
        return row

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> ColumnRule:
        return cls(row["rule"], row["pattern"], row.get("key_env"), row.get("length"))


def check_pattern(pattern: str, option: str) -> str:
    if not _PATTERN.fullmatch(pattern):
        raise InvalidValue(
            f"Column pattern {pattern!r} of {option} is not valid. Write db.table.column with exactly two dots, "
            "using letters (of any alphabet), digits, _ and $, and the wildcards * and ?, e.g. shop.users.password_hash or "
            "*.*.email.")
    return pattern


def parse_rules(exclude: Sequence[str] = (), mask: Sequence[str] = (), hash_: Sequence[str] = (),
                hash_key_env: str | None = None, truncate: Sequence[str] = ()) -> list[ColumnRule]:
    """Rules from the options of 'gate channel columns', validated (each kind in the order given)."""
    if hash_ and hash_key_env is None:
        raise InvalidValue("--hash needs --hash-key-env VAR: the environment variable holding the HMAC key "
                           "(gate stores the variable's name, never the key).")
    if hash_key_env is not None and not hash_:
        raise InvalidValue("--hash-key-env is given without --hash: it names the key of --hash rules only. Add "
                           "--hash PATTERN, or leave --hash-key-env out.")
    if hash_key_env is not None and not _ENV_NAME.match(hash_key_env):
        raise InvalidValue(f"--hash-key-env {hash_key_env!r} is not an environment variable name. Use letters, "
                           "digits and underscores, not starting with a digit, e.g. GATE_HASH_KEY.")
    rules = [ColumnRule("exclude", check_pattern(p, "--exclude")) for p in exclude]
    rules += [ColumnRule("mask", check_pattern(p, "--mask")) for p in mask]
    rules += [ColumnRule("hash", check_pattern(p, "--hash"), key_env=hash_key_env) for p in hash_]
    for spec in truncate:
        pattern, _, length = spec.rpartition("=")
        if not _LENGTH.fullmatch(length) or not 1 <= int(length) <= MAX_LENGTH:
            raise InvalidValue(f"--truncate {spec!r} is not valid. Write db.table.column=N with N a whole number of "
                               f"characters (bytes for binary columns) from 1 to {MAX_LENGTH}, e.g. "
                               "shop.docs.body=100.")
        rules.append(ColumnRule("truncate", check_pattern(pattern, "--truncate"), length=int(length)))
    return rules


def rule_keys(rules: Sequence[ColumnRule]) -> dict[str, bytes]:
    """The HMAC keys of the hash rules, read from the environment; a variable not set is refused."""
    keys: dict[str, bytes] = {}
    for rule in rules:
        if rule.key_env is not None and rule.key_env not in keys:
            value = os.environ.get(rule.key_env)
            if not value:
                raise MissingSecret(
                    f"The column rule {rule.describe()} takes its HMAC key from the environment variable "
                    f"{rule.key_env}, which is not set (or empty) for this gate process, so gate does not start (a "
                    "running gate stops): it would write the column unhashed. Export "
                    f"{rule.key_env} with the key and start gate again.")
            keys[rule.key_env] = value.encode()
    return keys


def matching(rules: Sequence[ColumnRule], db: str, table: str, column: str) -> list[ColumnRule]:
    return [rule for rule in rules if rule.matches(db, table, column)]


def _mask(_v: Value) -> Value:
    return MASK


def transform(rule: ColumnRule, keys: Mapping[str, bytes]) -> Transform:
    """The value function of a mask, hash or truncate rule. Text is hashed as UTF-8; a hash is lowercase hex."""
    if rule.kind == "mask":
        return _mask
    if rule.kind == "hash":
        assert rule.key_env is not None
        key = keys[rule.key_env]
        return lambda v: hmac.new(key, v if isinstance(v, bytes) else v.encode(), hashlib.sha256).hexdigest()
    if rule.kind == "truncate":
        n = rule.length
        return lambda v: v[:n]
    raise ValueError(f"a {rule.kind} rule has no value function")


def chain(rules: Sequence[ColumnRule], keys: Mapping[str, bytes]) -> Transform | None:
    """The matching rules of one column as one function (None: no transform); ``exclude`` is handled by the caller."""
    functions = [transform(rule, keys) for rule in rules]
    if not functions:
        return None
    if len(functions) == 1:
        return functions[0]

    def apply(v: Value) -> Value:
        for function in functions:
            v = function(v)
        return v

    return apply


def parse_keys(specs: Iterable[str]) -> dict[str, list[str]]:
    """``DB.TABLE=COL[,COL...]`` options (``--key``: a key a table lacks, chosen by the user) by table name."""
    keys = {}
    for spec in specs:
        match = re.fullmatch(r"([^.=\s]+\.[^.=\s]+)=([^=\s]+)", spec)
        if not match:
            raise InvalidValue(f"Key {spec!r} is not DB.TABLE=COL[,COL...], e.g. shop.orders=id or "
                               "shop.lines=order_id,line_no.")
        keys[match.group(1)] = match.group(2).split(",")
    return keys
