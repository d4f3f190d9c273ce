"""What a printed or routed name may hold (jobs.names): no line break nor any other control
character, the same rule for the models' validators and the checks outside them."""

from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError

from jobs.names import has_control_character, no_control_characters


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
