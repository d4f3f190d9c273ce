"""Retry backoff: exponential, capped, with equal jitter."""

from __future__ import annotations

import itertools
import random

from hypothesis import given
from hypothesis import strategies as st

from jobs.guard.policies import MAX_RETRY_DELAY_SECONDS, retry_delay


@given(base=st.integers(1, 3600), attempt=st.integers(1, 100), seed=st.integers())
def test_the_delay_is_between_half_and_all_of_the_doubled_base(
    base: int, attempt: int, seed: int
) -> None:
    full = min(base * 2 ** (attempt - 1), MAX_RETRY_DELAY_SECONDS)
    delay = retry_delay(base, attempt, random.Random(seed))
    assert full / 2 <= delay <= full


def test_the_delay_doubles_with_each_attempt_until_the_cap() -> None:
    low = [retry_delay(10, n, random.Random(0)) for n in range(1, 6)]
    assert all(later > earlier for earlier, later in itertools.pairwise(low))
    assert retry_delay(10, 40) <= MAX_RETRY_DELAY_SECONDS


def test_jitter_spreads_retries_that_failed_together() -> None:
    rng = random.Random(1)
    assert len({round(retry_delay(10, 3, rng), 3) for _ in range(20)}) > 10
