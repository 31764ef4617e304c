"""Lex the text of one SQL statement into tokens and walk them: the statement parsing under gate.capture.ddl.

sqlparse lexes the text (it is a non-validating lexer); Cursor gives the look-ahead and consume steps
of the small hand-written recursive-descent parsers in gate.capture.ddl and gate.capture.ddl_columns.
"""
from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import sqlparse
from sqlparse import tokens as T

ColumnDescriber = Callable[[str, str], list[dict[str, str]]]
"""(db, table) -> that table's CREATETABLE column dicts."""

# Token kinds: an unquoted word (keyword or name), a `backquoted` or "double-quoted" identifier,
# punctuation, anything else ('strings', numbers, operators).
WORD, QUOTED, PUNCT, OTHER = "word", "quoted", "punct", "other"

_EXECUTABLE_COMMENT = re.compile(r"/\*M?!(?:\d{5,6})?(.*)\*/", re.DOTALL)


class NotModelled(Exception):
    """The tokens leave the grammar modelled here."""


@dataclass(frozen=True)
class Tok:
    """One code token of a statement."""

    kind: str
    text: str  # as written
    value: str  # the identifier's name for QUOTED, else text
    start: int  # offsets in the normalised statement text (Context.code)
    end: int


@dataclass
class Context:
    """The statement being parsed and what its parsers share."""

    statement: str
    code: str  # the statement's tokens, comments removed, single spaces between
    default_db: str
    describe: ColumnDescriber | None
    tables: list[tuple[str, str]] = field(default_factory=list)  # table names read so far

    def text(self, toks: list[Tok]) -> str:
        """The normalised source text spanned by toks."""
        return self.code[toks[0].start : toks[-1].end]


def _kind(ttype: Any, text: str) -> str:
    """Token kind of text, which sqlparse lexed as ttype."""
    if ttype in T.Punctuation:
        return PUNCT
    if text[0] in '`"':
        return QUOTED
    if ttype in T.Number or not (text[0].isalnum() or text[0] == "_"):
        return OTHER
    return WORD


def _code_tokens(sql: str) -> Iterator[tuple[str, str, bool]]:
    """Yield (kind, text, preceded_by_space) for sql's code, executable comments included, other comments not."""
    spaced = False
    while sql:
        rest, pos, comment_end = "", 0, -1
        for ttype, value in sqlparse.lexer.tokenize(sql):
            start, pos = pos, pos + len(value)
            if start < comment_end:  # inside a '#' comment
                if pos > comment_end:  # a token (say 'string) runs past the comment's end: lex again from there
                    rest = sql[comment_end:]
                    break
                continue
            if ttype in T.Comment or ttype in T.Whitespace:
                executable = _EXECUTABLE_COMMENT.fullmatch(value) if ttype in T.Comment else None
                if executable:
                    yield from _code_tokens(f" {executable.group(1)} ")
                spaced = True
                continue
            hash_at = -1 if value.startswith(("`", "'", '"')) else value.find("#")
            if hash_at >= 0:  # MySQL '#' comment to the end of the line; sqlparse only knows "# "
                newline = sql.find("\n", start + hash_at)
                comment_end, value = (newline if newline >= 0 else len(sql)), value[:hash_at]
            if value:
                parts = value.split() if _kind(ttype, value) == WORD else [value]  # sqlparse joins "NOT NULL"
                for n, part in enumerate(parts):
                    yield _kind(ttype, part), part, spaced or n > 0
                spaced = False
        sql = rest


def lex(sql: str) -> tuple[list[Tok], str]:
    """Tokens of the first statement in sql and the normalised text their offsets refer to."""
    toks: list[Tok] = []
    pieces: list[str] = []
    size = 0
    for kind, text, spaced in _code_tokens(sql):
        if kind == PUNCT and text == ";":
            if toks:
                break
            continue
        if spaced and toks:
            pieces.append(" ")
            size += 1
        value = text[1:-1].replace(text[0] * 2, text[0]) if kind == QUOTED else text
        toks.append(Tok(kind, text, value, size, size + len(text)))
        pieces.append(text)
        size += len(text)
    return toks, "".join(pieces)


def split_items(toks: list[Tok]) -> list[list[Tok]]:
    """Split toks at commas outside parentheses."""
    items: list[list[Tok]] = [[]]
    depth = 0
    for tok in toks:
        if tok.kind == PUNCT:
            if tok.text == "(":
                depth += 1
            elif tok.text == ")":
                depth = max(depth - 1, 0)
            elif tok.text == "," and depth == 0:
                items.append([])
                continue
        items[-1].append(tok)
    return items


def word(tok: Tok) -> str:
    """The upper-cased text of an unquoted word, else ""."""
    return tok.text.upper() if tok.kind == WORD else ""


class Cursor:
    """A position in a token list with the look-ahead and consume steps the grammar needs."""

    def __init__(self, toks: list[Tok], ctx: Context) -> None:
        self.toks = toks
        self.ctx = ctx
        self.i = 0

    def sub(self, toks: list[Tok]) -> Cursor:
        return Cursor(toks, self.ctx)

    def done(self) -> bool:
        return self.i >= len(self.toks)

    def finish(self) -> None:
        if not self.done():
            raise NotModelled

    def at(self, *words: str, k: int = 0) -> bool:
        """Whether the token k ahead is an unquoted word among words (case-insensitive)."""
        j = self.i + k
        return j < len(self.toks) and word(self.toks[j]) in words

    def at_seq(self, *words: str) -> bool:
        return all(self.at(word, k=n) for n, word in enumerate(words))

    def at_punct(self, char: str) -> bool:
        return not self.done() and self.toks[self.i].kind == PUNCT and self.toks[self.i].text == char

    def accept(self, *words: str) -> bool:
        """Consume words if they come next, in this order."""
        if self.at_seq(*words):
            self.i += len(words)
            return True
        return False

    def accept_any(self, *words: str) -> bool:
        """Consume the next token if it is one of words."""
        if self.at(*words):
            self.i += 1
            return True
        return False

    def expect(self, *words: str) -> None:
        if not self.accept(*words):
            raise NotModelled

    def next(self) -> Tok:
        if self.done():
            raise NotModelled
        self.i += 1
        return self.toks[self.i - 1]

    def ident(self) -> str:
        tok = self.next()
        if tok.kind not in (WORD, QUOTED):
            raise NotModelled
        return tok.value

    def table(self) -> tuple[str, str]:
        """Read ``[db.]table``; an unqualified name is in the session's database."""
        name = self.ident()
        if self.at_punct("."):
            self.i += 1
            qualified = (name, self.ident())
        else:
            qualified = (self.ctx.default_db, name)
        self.ctx.tables.append(qualified)
        return qualified

    def group(self) -> list[Tok]:
        """Consume a parenthesised group and return the tokens inside it."""
        if not self.at_punct("("):
            raise NotModelled
        depth = 0
        for j in range(self.i, len(self.toks)):
            tok = self.toks[j]
            if tok.kind == PUNCT and tok.text in ("(", ")"):
                depth += 1 if tok.text == "(" else -1
                if depth == 0:
                    inner, self.i = self.toks[self.i + 1 : j], j + 1
                    return inner
        raise NotModelled

    def rest(self) -> list[Tok]:
        toks, self.i = self.toks[self.i :], len(self.toks)
        return toks

    def skip_wait(self) -> None:
        """Skip MariaDB's ``WAIT n | NOWAIT``."""
        if not self.accept("NOWAIT") and self.accept("WAIT"):
            self.next()



def starts_query(toks: list[Tok]) -> bool:
    """Whether a parenthesised group holds a query rather than column definitions."""
    return bool(toks) and (word(toks[0]) in ("SELECT", "WITH") or toks[0].text == "(")

