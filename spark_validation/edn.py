"""A small reader for EDN, the format of Jepsen's history.edn.

Covers what Jepsen writes: maps, vectors, lists, sets, keywords, symbols, strings,
integers (with N), floats (with M), nil/true/false, characters, comments, discards
(#_) and tagged values (#jepsen.history.Op{...} reads as its map). A dependency for
this would be larger than the reader.
"""
from __future__ import annotations

import re
from typing import Iterator


class Keyword(str):
    """An EDN keyword, :name, held as its name."""

    def __repr__(self) -> str:
        return ":" + self


class Symbol(str):
    """An EDN symbol."""


class EdnError(ValueError):
    pass


_TOKEN = re.compile(r"""
    (?P<ws>[\s,]+|;[^\n]*)
  | (?P<open>\#\{|[\[({])
  | (?P<close>[\])}])
  | (?P<string>"(?:[^"\\]|\\.)*")
  | (?P<discard>\#_)
  | (?P<tag>\#[A-Za-z][^\s,\[\](){}"]*)
  | (?P<char>\\(?:newline|space|tab|return|u[0-9a-fA-F]{4}|.))
  | (?P<atom>[^\s,\[\](){}"\\;]+)
""", re.VERBOSE)
_INT = re.compile(r"[+-]?\d+N?")
_FLOAT = re.compile(r"[+-]?\d+(\.\d*)?([eE][+-]?\d+)?M?")
_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", '"': '"', "\\": "\\"}
_CHARS = {"newline": "\n", "space": " ", "tab": "\t", "return": "\r"}
_CLOSER = {"[": "]", "(": ")", "{": "}", "#{": "}"}


def _tokens(text: str) -> Iterator[tuple[str, str, int]]:
    position = 0
    while position < len(text):
        m = _TOKEN.match(text, position)
        if not m:
            raise EdnError(f"unreadable EDN at character {position}: {text[position:position + 20]!r}")
        if m.lastgroup != "ws":
            yield m.lastgroup, m.group(), position
        position = m.end()


def _atom(token: str):
    if token == "nil":
        return None
    if token in ("true", "false"):
        return token == "true"
    if token.startswith(":"):
        return Keyword(token[1:])
    if _INT.fullmatch(token):
        return int(token.rstrip("N"))
    if _FLOAT.fullmatch(token):
        return float(token.rstrip("M"))
    return Symbol(token)


def _string(token: str) -> str:
    return re.sub(r"\\(u[0-9a-fA-F]{4}|.)",
                  lambda m: chr(int(m.group(1)[1:], 16)) if m.group(1)[0] == "u" and len(m.group(1)) == 5
                  else _ESCAPES.get(m.group(1), m.group(1)), token[1:-1])


def read_all(text: str) -> list:
    """Every top-level form in text."""
    tokens = list(_tokens(text))
    position = 0

    def form():
        nonlocal position
        if position >= len(tokens):
            raise EdnError("unexpected end of EDN")
        kind, token, at = tokens[position]
        position += 1
        if kind == "open":
            items = []
            while position < len(tokens) and tokens[position][1] != _CLOSER[token]:
                item = form()
                if item is not _DISCARDED:
                    items.append(item)
            if position >= len(tokens):
                raise EdnError(f"unclosed {token} opened at character {at}")
            position += 1
            if token == "{":
                if len(items) % 2:
                    raise EdnError(f"map at character {at} has an odd number of forms")
                return {_hashable(k): v for k, v in zip(items[::2], items[1::2])}
            if token == "#{":
                return frozenset(_hashable(i) for i in items)
            return tuple(items) if token == "(" else list(items)
        if kind == "close":
            raise EdnError(f"unexpected {token} at character {at}")
        if kind == "string":
            return _string(token)
        if kind == "char":
            name = token[1:]
            return _CHARS.get(name, chr(int(name[1:], 16)) if len(name) == 5 and name[0] == "u" else name)
        if kind == "discard":
            form()
            return _DISCARDED
        if kind == "tag":
            return form()
        return _atom(token)

    forms = []
    while position < len(tokens):
        item = form()
        if item is not _DISCARDED:
            forms.append(item)
    return forms


_DISCARDED = object()


def _hashable(x):
    if isinstance(x, list):
        return tuple(_hashable(i) for i in x)
    if isinstance(x, dict):
        return tuple(sorted((_hashable(k), _hashable(v)) for k, v in x.items()))
    return x


def to_json(x):
    """An EDN value as JSON-able data: keywords become ":name", sets and lists become lists."""
    if isinstance(x, Keyword):
        return ":" + x
    if isinstance(x, dict):
        return {(str(to_json(k)) if not isinstance(k, str) or isinstance(k, Keyword) else k): to_json(v)
                for k, v in x.items()}
    if isinstance(x, (list, tuple, frozenset)):
        return [to_json(i) for i in (sorted(x, key=repr) if isinstance(x, frozenset) else x)]
    return x
