"""State a process keeps about itself (jobs.process.process_state): a forked child gets its own, and
a problem is recorded at most once every so often per process."""

from __future__ import annotations

import os

import pytest

from jobs.process import process_state
from jobs.process.process_state import ProcessState, mine


def test_the_first_record_is_due_then_none_until_the_interval_passed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = [1000.0]
    monkeypatch.setattr(process_state.time, "monotonic", lambda: clock[0])
    state = ProcessState()
    assert state.record_due(60)
    clock[0] += 59.9
    assert not state.record_due(60)
    clock[0] += 0.1
    assert state.record_due(60)
    assert not state.record_due(60)


def test_the_process_that_made_the_state_keeps_it() -> None:
    state = ProcessState()
    assert mine(state, ProcessState) is state


def test_a_forked_child_starts_afresh() -> None:
    state = ProcessState()
    state.record_due(60)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: says whether it got a fresh state that may record at once
        own = mine(state, ProcessState)
        os.write(write, b"1" if own is not state and own.record_due(60) else b"0")
        os._exit(0)
    os.close(write)
    os.waitpid(pid, 0)
    assert os.read(read, 1) == b"1"
    os.close(read)
    assert mine(state, ProcessState) is state and not state.record_due(60)
