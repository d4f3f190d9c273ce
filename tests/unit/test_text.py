"""What the database can hold (``jobs.values.text``): NUL and lone surrogates are named, everything
else passes, and text cut for a list says so."""

from __future__ import annotations

import pytest
from hypothesis import given

from jobs.values import text
from tests.support.fuzzing import any_text, fuzz_settings


@pytest.mark.parametrize(
    ("given_text", "said"),
    [
        ("a\x00b", r"cannot contain the NUL character (\u0000)"),
        ("\ud800", "lone surrogate (U+D800)"),
        ("x\udcff", "lone surrogate (U+DCFF)"),
        ("\udfff", "lone surrogate (U+DFFF)"),
    ],
)
def test_what_postgresql_cannot_hold_is_named(given_text: str, said: str) -> None:
    problem = text.problem(given_text)
    assert problem is not None and said in problem
    assert not text.is_storable(given_text)


@fuzz_settings(300)
@given(any_text(max_size=30))
def test_text_is_storable_exactly_when_utf8_encodes_it_without_a_nul(drawn: str) -> None:
    try:
        drawn.encode("utf-8")
        encodes = True
    except UnicodeEncodeError:
        encodes = False
    assert text.is_storable(drawn) == (encodes and "\x00" not in drawn)
    assert (text.problem(drawn) is None) == text.is_storable(drawn)
    text.printable(drawn).encode("utf-8")  # an error line can always show it


def test_a_character_beyond_the_basic_plane_is_storable() -> None:
    emoji = "\U0001f600"
    assert text.is_storable(emoji)


def test_a_long_text_is_cut_for_a_list_with_an_ellipsis() -> None:
    assert text.cut("short") == "short"
    cut = text.cut("x" * 500)
    assert len(cut) == text.LIST_CUT and cut.endswith("…")
    assert text.cut("x" * 10, 5) == "xxxx…"
