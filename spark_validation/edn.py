"""A reader for EDN, the format of Jepsen's history.edn.

Covers what Jepsen writes: maps, vectors, lists, sets, keywords, symbols, strings,
integers (with N), floats (with M), nil/true/false, characters, comments, discards
(#_) and tagged values (#jepsen.history.Op{...} reads as its map).

Written here rather than taken from edn_format (the maintained EDN reader on PyPI) for
speed: on Jepsen op lines edn_format.loads takes about 450 us a line, this reader about
13 us (one C-level regex split, then a loop with an explicit stack), and a Jepsen history
has a line per op. See benchmarks/README.md.
"""
from __future__ import annotations

import re


class Keyword(str):
    """An EDN keyword, :name, held as its name."""

    def __repr__(self) -> str:
        return ":" + self


class Symbol(str):
    """An EDN symbol."""


class EdnError(ValueError):
    pass


class EdnEndError(EdnError):
    """The text ends inside a form."""


class UnexpectedCloser(EdnError):
    """A ], ) or } that closes nothing."""


# one token per match; whitespace and commas fall between matches. A lone '"' is an unterminated string.
_TOKEN = re.compile(r'''"(?:[^"\\]|\\.)*"|"|\#\{|[\[\](){}]|;[^\n]*|[^\s,\[\](){}";]+''')
_INT = re.compile(r"[+-]?\d+N?")
_FLOAT = re.compile(r"[+-]?\d+(\.\d*)?([eE][+-]?\d+)?M?")
_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", '"': '"', "\\": "\\"}
_CHARS = {"newline": "\n", "space": " ", "tab": "\t", "return": "\r"}
_CLOSER = {"[": "]", "(": ")", "{": "}", "#{": "}"}
_KEYWORDS_MAX = 4096  # keywords read once and shared (Jepsen uses a few dozen)
_keywords: dict[str, Keyword] = {}


def _atom(token: str):
    if token.isdigit():
        return int(token)
    if token[0] == ":":
        keyword = _keywords.get(token)
        if keyword is None:
            keyword = Keyword(token[1:])
            if len(_keywords) < _KEYWORDS_MAX:
                _keywords[token] = keyword
        return keyword
    if token == "nil":
        return None
    if token in ("true", "false"):
        return token == "true"
    if _INT.fullmatch(token):
        return int(token.rstrip("N"))
    if _FLOAT.fullmatch(token):
        return float(token.rstrip("M"))
    if token[0] == "\\":
        name = token[1:]
        return _CHARS.get(name, chr(int(name[1:], 16)) if len(name) == 5 and name[0] == "u" else name)
    return Symbol(token)


def _string(token: str) -> str:
    if len(token) == 1:
        raise EdnError("unterminated string")
    if "\\" not in token:
        return token[1:-1]
    return re.sub(r"\\(u[0-9a-fA-F]{4}|.)",
                  lambda m: chr(int(m.group(1)[1:], 16)) if m.group(1)[0] == "u" and len(m.group(1)) == 5
                  else _ESCAPES.get(m.group(1), m.group(1)), token[1:-1])


def _collection(opener: str, items: list):
    if opener == "[":
        return items
    if opener == "{":
        if len(items) % 2:
            raise EdnError("a map with an odd number of forms")
        return {_hashable(k): v for k, v in zip(items[::2], items[1::2])}
    if opener == "#{":
        return frozenset(_hashable(i) for i in items)
    return tuple(items)


def read_all(text: str) -> list:
    """Every top-level form in text."""
    top: list = []
    openers: list[str] = []
    frames: list[list] = [top]
    discard_at: list[int] = []  # depths at which the next complete form is dropped (#_)
    for token in _TOKEN.findall(text):
        first = token[0]
        if first in "[({" or token == "#{":
            openers.append(token)
            frames.append([])
            continue
        if first in "])}":
            if not openers:
                raise UnexpectedCloser(f"unexpected {token}")
            opener = openers.pop()
            if _CLOSER[opener] != token:
                raise EdnError(f"{opener} closed by {token}")
            value = _collection(opener, frames.pop())
        elif first == '"':
            value = _string(token)
        elif first == ";":
            continue
        elif first == "#":
            if token == "#_":
                discard_at.append(len(frames))
            continue  # a tag (#jepsen.history.Op): the form it tags reads as itself
        else:
            value = _atom(token)
        if discard_at and discard_at[-1] == len(frames):
            discard_at.pop()
            continue
        frames[-1].append(value)
    if openers:
        raise EdnEndError(f"unexpected end of EDN: {openers[-1]} not closed")
    return top


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
