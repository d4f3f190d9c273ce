"""Loaded (through ``PYTHONPATH``) by every process a clock-skew test starts under Debian's
libfaketime, which shifts the wall clock only (``FAKETIME_DONT_FAKE_MONOTONIC=1``: a skewed
node's monotonic clock runs like anyone's).

libfaketime 0.9.10 (Debian 12) fails Python 3.11's ``time.sleep``, which sleeps with
``clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME)``: it converts the real monotonic deadline as if
it were faked and the call fails with EINVAL (wolfcw/libfaketime#426, fixed after 0.9.10). Here
``time.sleep`` waits with ``select`` instead, a relative timeout, which no clock shift affects.
Nothing else changes: every clock reading is libfaketime's.
"""

from __future__ import annotations

import select
import time
from typing import SupportsIndex


def _sleep(seconds: float | SupportsIndex) -> None:
    select.select([], [], [], float(seconds))


time.sleep = _sleep
