"""Take the secrets out of a statement's text before gate writes or logs any of it.

A DDL statement reaches the DC as the source ran it (the payload's ``SQL``, ``OTHERS`` and the text
of each table of a multi-table statement), and some statements carry a password: a FEDERATED or
CONNECT table's ``CONNECTION='mysql://user:password@host/db/t'``, an ODBC or JDBC connection string
(``...;PWD=secret``, ``...?password=secret``), CONNECT's ``OPTION_LIST='user=u,password=secret'``, a
Spider comment (``password "secret"``), ``CREATE/ALTER SERVER ... OPTIONS (PASSWORD 'secret')``,
``IDENTIFIED BY 'secret'``, ``SET PASSWORD ... = 'hash'``, ``MASTER_PASSWORD='secret'``.
:func:`redact_secrets` replaces each secret with ``***``; the statement's tokens stay as they were,
so it parses as before.
"""

from __future__ import annotations

import re

import sqlparse
from sqlparse import tokens as T

MASK = "***"

_ESCAPED = r"(?:\\.|''|\"\")"  # a character escaped in a string literal: \x, '' or ""
_URL_PASSWORD = re.compile(
    rf"(?P<head>[A-Za-z][A-Za-z0-9+.-]*://(?:[^:/@\s'\"\\]|{_ESCAPED})*:)(?:[^\s'\"\\]|{_ESCAPED})*(?=@)")
"""``scheme://user:secret@host``: the secret runs to the last ``@`` (it may hold ``/`` and ``@``)."""

_OPTION_PASSWORD = re.compile(rf"(?P<head>\b(?:PASSWORD|PASSWD|PWD)\s*=\s*)(?:[^\s,;&'\"()\\]|{_ESCAPED})+",
                              re.IGNORECASE)
"""``password=secret`` in an option list or a connection string (ODBC ``PWD=``, JDBC ``?password=``)."""

_SPIDER_PASSWORD = re.compile(r"(?P<head>\bPASSWORD\s+\")(?:[^\"\\]|\\.)*(?=\")", re.IGNORECASE)
"""Spider's ``password "secret"`` in a table or partition comment."""

_EXECUTABLE_COMMENT = re.compile(r"(/\*M?!(?:\d{5,6})?)(.*)(\*/)", re.DOTALL)
_PASSWORD_WORDS = frozenset({"PASSWORD", "MASTER_PASSWORD"})  # a literal right after one is a secret
_IDENTIFIED_WORDS = frozenset({"BY", "USING", "AS"})  # ... after one of these in an IDENTIFIED clause
_SKIPPED = frozenset({"=", "("})  # between such a word and its literal


def redact_secrets(text: str) -> str:
    """``text`` with every password it carries replaced by ``***``: ``scheme://user:***@host``,
    ``PASSWORD '***'`` (a string literal keeps its quotes), ``password=***``, ``password "***"``.
    Only string literals and comments change (the code in an executable comment as any code)."""
    if not _might_hold_secret(text):
        return text
    pieces: list[str] = []
    words: list[str] = []  # the statement's words so far, upper-cased
    before = ""  # the last word or punctuation before this token, "=" and "(" skipped
    for ttype, value in sqlparse.lexer.tokenize(text):
        if ttype in T.String.Single or ttype in T.String.Symbol:
            if _secret_follows(before, words):
                value = value[0] + MASK + value[0]
            else:
                value = _redact_literal(value)
            before = "literal"
        elif ttype in T.Comment:  # in the payload's SQL too: an executable one is code, any one may hold a URL
            executable = _EXECUTABLE_COMMENT.fullmatch(value)
            value = (executable[1] + redact_secrets(executable[2]) + executable[3] if executable
                     else _redact_literal(value))
        elif ttype in T.Whitespace:
            pass
        elif value in _SKIPPED and before != "literal":
            pass
        elif ttype in T.Keyword or ttype in T.Name or ttype in T.Name.Builtin:
            word = value.upper()
            if word != "PASSWORD" or before not in _PASSWORD_WORDS:  # PASSWORD = PASSWORD('...')
                before = word
            words.append(word)
        else:
            before = value
        pieces.append(value)
    return "".join(pieces)


def _secret_follows(before: str, words: list[str]) -> bool:
    """Whether a string literal after ``before`` (in a statement whose words so far are ``words``) is a secret."""
    if before in _PASSWORD_WORDS:
        return True
    if before in _IDENTIFIED_WORDS and "IDENTIFIED" in words and (words[0] == "GRANT" or "USER" in words[1:4]):
        return True
    return before == "=" and words[:2] == ["SET", "PASSWORD"]  # SET PASSWORD FOR 'u'@'h' = 'hash'


def _redact_literal(literal: str) -> str:
    """A string literal's (or comment's) URL passwords, ``password=`` options and Spider passwords masked."""
    literal = _URL_PASSWORD.sub(lambda m: m["head"] + MASK, literal)
    literal = _OPTION_PASSWORD.sub(lambda m: m["head"] + MASK, literal)
    return _SPIDER_PASSWORD.sub(lambda m: m["head"] + MASK, literal)


def _might_hold_secret(text: str) -> bool:
    """A cheap test that spares the common statement the lexer."""
    lowered = text.lower()
    return "://" in lowered or "pass" in lowered or "pwd" in lowered or "identified" in lowered
