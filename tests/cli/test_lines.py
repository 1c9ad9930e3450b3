"""The text line format: what `kspec consume --print headers,key,value` prints, `kspec produce` reads back."""
from __future__ import annotations

import json

import pytest

from kspec.ops.lines import LineError, LineRecord, PrintedRecord, format_json, format_text, parse_line


def printed(key, value, headers) -> PrintedRecord:
    return PrintedRecord(topic="t", partition=1, offset=7, timestamp=1000, key=key, value=value, headers=headers)


@pytest.mark.parametrize("record", [
    LineRecord(value="v", key="k", headers=(("a", "1"), ("b", ""))),
    LineRecord(value="", key="", headers=()),
    LineRecord(value="has\ttabs\tinside", key="k", headers=(("h", "x:y"),)),
])
def test_printed_text_parses_back_to_the_same_record(record):
    line = format_text(printed(record.key, record.value, record.headers), ("headers", "key", "value"))
    assert parse_line(line, "\t", parse_headers=True) == record


def test_lines_missing_their_parts_are_refused():
    with pytest.raises(LineError, match="no key separator"):
        parse_line("novalue", "\t", parse_headers=False)
    with pytest.raises(LineError, match="no header section"):
        parse_line("k", None, parse_headers=True)
    with pytest.raises(LineError, match="not name:value"):
        parse_line("broken\tv", None, parse_headers=True)


def test_json_lines_keep_nulls_and_header_order():
    line = format_json(printed(None, "v", (("b", "2"), ("a", None))), ("offset", "key", "value", "headers"))
    assert json.loads(line) == {"offset": 7, "key": None, "value": "v", "headers": [["b", "2"], ["a", None]]}
