"""JSON values people type: every text parses or is a ValueError, and only what jsonb stores
unchanged is accepted."""

from __future__ import annotations

from typing import Any

import pytest

from jobs.values.jsonvalues import MAX_DEPTH, check_arguments_size, check_storable, loads
from jobs.values.text import MAX_ARGUMENTS_BYTES


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{not json", "not valid JSON"),
        ("[" * 100_000 + "]" * 100_000, "nested too deeply"),
        ("[" + "9" * 5000 + "]", "a number has too many digits: at most 4300"),
        (b"\xff\xfe{\x00}", "not valid JSON"),
        (b"\x80", "not valid JSON"),
    ],
)
def test_any_text_parses_or_is_a_value_error(text: str | bytes, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        loads(text)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (["a\x00b"], "NUL"),
        ({"\x00": 1}, "NUL"),
        ({"a": [{"b": "\x00"}]}, "NUL"),
        (loads('["\\ud800"]'), "lone surrogate"),
        (loads('{"\\udfff": 1}'), "lone surrogate"),
        ([float("nan")], "nan is not a number JSON can store"),
        ({"a": float("inf")}, "inf is not a number JSON can store"),
        (loads("[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1)), "nested too deeply: at most 32"),
    ],
)
def test_what_jsonb_cannot_store_is_refused(value: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        check_storable(value)


@pytest.mark.parametrize(
    "value",
    [
        [],
        {"city": "Paris", "n": 10**4000, "x": -1.5e300, "ok": [True, None]},
        loads("[" * MAX_DEPTH + "]" * MAX_DEPTH),
        ["é", "😀", "\u2028"],
    ],
)
def test_what_jsonb_stores_is_accepted(value: Any) -> None:
    check_storable(value)


def test_arguments_are_bounded_in_bytes_of_compact_json() -> None:
    # {"a":"…"} is 8 bytes around the string; "é" is two bytes of UTF-8.
    check_arguments_size({"a": "x" * (MAX_ARGUMENTS_BYTES - 8)})
    with pytest.raises(ValueError, match=f"at most {MAX_ARGUMENTS_BYTES}"):
        check_arguments_size({"a": "é" * (MAX_ARGUMENTS_BYTES // 2)})
    with pytest.raises(ValueError, match=f"at most {MAX_ARGUMENTS_BYTES}"):
        check_arguments_size({"a": [0] * 100_000})
