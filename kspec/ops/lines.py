"""Records as lines of text: how `kspec produce` reads them and `kspec consume` prints them.

The text form follows Kafka's console tools: an optional header section, then an optional
key, then the value, separated by tabs; headers are `name:value` pairs joined by commas:

    source:web,trace:7f3a<TAB>user-42<TAB>{"amount": 3}

So `kspec consume --print headers,key,value` prints exactly what
`kspec produce --parse-headers --key-separator $'\\t'` reads. The JSON form is one object a line.
Pure functions: no clients, no I/O.
"""
from __future__ import annotations

import json
from dataclasses import dataclass

HEADERS_DELIMITER = "\t"  # between the header section and the rest of the line
HEADERS_SEPARATOR = ","  # between two headers
HEADER_KEY_SEPARATOR = ":"  # between a header's name and its value
FIELDS = ("topic", "partition", "offset", "timestamp", "headers", "key", "value")


class LineError(ValueError):
    """A line that does not have the shape the options ask for."""


@dataclass(frozen=True)
class LineRecord:
    value: str
    key: str | None = None
    headers: tuple[tuple[str, str], ...] = ()


def parse_line(line: str, key_separator: str | None, parse_headers: bool) -> LineRecord:
    """One input line (without its newline) as a record."""
    headers: tuple[tuple[str, str], ...] = ()
    if parse_headers:
        section, found, line = line.partition(HEADERS_DELIMITER)
        if not found:
            raise LineError(f"no header section: expected headers, then a tab ({HEADERS_DELIMITER!r})")
        headers = parse_headers_section(section)
    key = None
    if key_separator is not None:
        key, found, line = line.partition(key_separator)
        if not found:
            raise LineError(f"no key separator {key_separator!r}")
    return LineRecord(value=line, key=key, headers=headers)


def parse_headers_section(section: str) -> tuple[tuple[str, str], ...]:
    if not section:
        return ()
    headers = []
    for pair in section.split(HEADERS_SEPARATOR):
        name, found, value = pair.partition(HEADER_KEY_SEPARATOR)
        if not found or not name:
            raise LineError(f"header {pair!r} is not name{HEADER_KEY_SEPARATOR}value")
        headers.append((name, value))
    return tuple(headers)


def decode(data: bytes | None) -> str | None:
    """Bytes shown as text; bytes that are not UTF-8 appear as \\x escapes."""
    return None if data is None else data.decode("utf-8", errors="backslashreplace")


@dataclass(frozen=True)
class PrintedRecord:
    topic: str
    partition: int
    offset: int
    timestamp: int
    key: str | None
    value: str | None
    headers: tuple[tuple[str, str | None], ...]


def format_text(record: PrintedRecord, fields: tuple[str, ...], null_marker: str = "") -> str:
    """The chosen fields, in the given order, separated by tabs."""
    cells = []
    for field in fields:
        if field == "headers":
            cells.append(HEADERS_SEPARATOR.join(f"{n}{HEADER_KEY_SEPARATOR}{v or ''}" for n, v in record.headers))
        else:
            cell = getattr(record, field)
            cells.append(null_marker if cell is None else str(cell))
    return "\t".join(cells)


def format_json(record: PrintedRecord, fields: tuple[str, ...]) -> str:
    """The chosen fields as one JSON object; headers as a list of [name, value] pairs."""
    return json.dumps({field: [list(h) for h in record.headers] if field == "headers" else getattr(record, field)
                       for field in fields}, ensure_ascii=False)
