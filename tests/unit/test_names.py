"""What a printed or routed name may hold (jobs.values.names): no line break nor any other control
character, the same rule for the models' validators and the checks outside them."""

from __future__ import annotations

import unicodedata

import pytest
from django.core.exceptions import ValidationError

from jobs.models import Job
from jobs.values.names import (
    INVISIBLE_CHARACTERS,
    MAX_JOB_NAME,
    has_control_character,
    invisible_characters,
    is_padded_or_blank,
    job_name_for,
    job_name_problems,
    no_control_characters,
    not_padded,
    skeleton,
)


@pytest.mark.parametrize(
    "text",
    ["line\nbreak", "carriage\rreturn", "nul\x00", "escape\x1b[2J", "del\x7f", "nel\x85",
     "line\u2028separator", "paragraph\u2029separator", "\t"],
)  # fmt: skip
def test_control_characters_and_unicode_line_separators_are_found(text: str) -> None:
    assert has_control_character(text)


@pytest.mark.parametrize("text", ["", "nightly-report", "Café über 東京", "a b", "job:{city}"])
def test_printable_names_are_clean(text: str) -> None:
    assert not has_control_character(text)


def test_the_validator_refuses_them_naming_what_it_checks() -> None:
    validator = no_control_characters("A queue name")
    validator("reports.eu-west")
    with pytest.raises(ValidationError) as info:
        validator("reports\neu")
    assert info.value.code == "control_character_in_name"
    assert info.value.messages == [
        "A queue name cannot contain a line break or another control character."
    ]
    with pytest.raises(ValidationError):
        validator("trailing\n")  # \Z, not $: a final line break is one too


@pytest.mark.parametrize(
    "text", ["", " ", " report", "report ", "report\u00a0", "\u3000report", "report\u2009"]
)
def test_blank_names_and_names_with_a_space_at_an_end_are_padded(text: str) -> None:
    assert is_padded_or_blank(text)
    with pytest.raises(ValidationError) as info:
        not_padded("A job name")(text)
    assert info.value.messages == ["A job name cannot be blank or begin or end with a space."]


@pytest.mark.parametrize("text", ["report", "nightly report", "a", "東京 report"])
def test_names_with_inner_spaces_are_not(text: str) -> None:
    assert not is_padded_or_blank(text)


def test_the_spaces_are_every_space_python_knows_that_is_not_a_control_character() -> None:
    spaces = {
        chr(c) for c in range(0x110000) if chr(c).isspace() and not has_control_character(chr(c))
    }
    assert spaces and all(is_padded_or_blank(space) for space in spaces)


@pytest.mark.parametrize(
    ("key", "name"),
    [
        ("nightly-report", "nightly-report"),
        ("reports/nightly", "reports\u2215nightly"),
        ("line\nbreak", "line break"),
        (" padded ", "\u2420padded\u2420"),
        ("\nleading", "\u2420leading"),
        ("", "\u2420"),
    ],
)
def test_an_entry_key_names_the_job_it_would_if_it_were_a_job_name(key: str, name: str) -> None:
    assert job_name_for(key) == name
    assert job_name_problems(name) == []
    assert job_name_for(name) == name  # a job's own name is kept: the same on every pass


def test_a_key_too_long_is_cut_with_a_digest_of_the_whole() -> None:
    first, second = job_name_for("x" * 300 + "a"), job_name_for("x" * 300 + "b")
    assert len(first) == len(second) == MAX_JOB_NAME and first != second
    assert job_name_for(first) == first


def test_the_invisible_characters_are_every_format_character_and_the_default_ignorables() -> None:
    # Unicode's format category (Cf) in this Python's database, and the default-ignorable code
    # points that are not (combining grapheme joiner, Hangul fillers, variation selectors).
    found = {c for c in map(chr, range(0x110000)) if invisible_characters(c)}
    formats = {c for c in map(chr, range(0x110000)) if unicodedata.category(c) == "Cf"}
    # The table is Unicode 14.0's (Python 3.11) and a CHECK constraint holds it in the database:
    # the format characters Unicode 15.0 added (Python 3.12: Egyptian hieroglyph format
    # controls) come with the migration that takes the table to 15.0.
    newer = (
        {chr(c) for c in range(0x13439, 0x13440)} if unicodedata.unidata_version >= "15" else set()
    )
    assert formats - found <= newer
    assert {"\u034f", "\u115f", "\u3164", "\ufe0f", "\U000e0100"} <= found
    assert INVISIBLE_CHARACTERS.isascii()  # readable as text by PostgreSQL too


@pytest.mark.parametrize(
    ("one", "other"),
    [("demo.quick", "demo.qu\u0456ck"), ("paypal", "\u0440\u0430ypal"), ("modern", "rnodern"),
     ("report-1", "report-l"), ("caf\u00e9", "cafe\u0301"), ("demo.quick", "demo.\u200bquick")],
)  # fmt: skip
def test_names_that_print_alike_have_one_skeleton(one: str, other: str) -> None:
    assert skeleton(one) == skeleton(other)


@pytest.mark.parametrize(("one", "other"), [("report", "Report"), ("report", "reports")])
def test_names_that_print_differently_do_not(one: str, other: str) -> None:
    assert skeleton(one) != skeleton(other)


def test_an_entry_key_with_an_invisible_character_names_it_in_its_job_name() -> None:
    assert job_name_for("demo.\u202equick\u200b") == "demo.[U+202E]quick[U+200B]"
    assert not job_name_problems(job_name_for("demo.\u202equick\u200b"))


_ALL_BUT = {
    name: [f.name for f in Job._meta.concrete_fields if f.name != name]
    for name in ("queue", "exchange", "routing_key")
}


def test_routing_names_refuse_what_reads_like_another() -> None:
    """A queue, exchange or routing key with an invisible character routes elsewhere than the
    name it prints as."""
    for field, value in (
        ("queue", "re\u200bports"),
        ("exchange", "x\u2060"),
        ("routing_key", "\ufeffk"),
    ):
        with pytest.raises(ValidationError, match="invisible or format character"):
            Job(**{field: value}).clean_fields(exclude=_ALL_BUT[field])
