"""Hypothesis settings and strategies the fuzz tests share."""

from __future__ import annotations

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st


def fuzz_settings(max_examples: int) -> settings:
    """``max_examples`` examples, no deadline, no example database, no health check."""
    return settings(
        max_examples=max_examples,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )


# Any code point, lone surrogates (U+D800 to U+DFFF) and NUL drawn often: what JSON's escapes, a
# form's JSON or a command line's invalid UTF-8 can put in a Python string.
ANY_CHARACTER = st.one_of(
    st.characters(),
    st.integers(0xD800, 0xDFFF).map(chr),
    st.sampled_from(["\x00", "\n", "\u2028"]),
)


def any_text(min_size: int = 0, max_size: int = 20) -> st.SearchStrategy[str]:
    """Text of ``ANY_CHARACTER``s."""
    return st.text(alphabet=ANY_CHARACTER, min_size=min_size, max_size=max_size)
