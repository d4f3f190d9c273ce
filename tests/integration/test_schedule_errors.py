"""Jobs a beat cannot schedule, kept in ``ScheduleError`` (jobs.beat.schedule_errors), against
real PostgreSQL: recorded once per job whatever the number of beats, rewritten only when the
error changes, cleared when the job can be scheduled again, printable and bounded."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from jobs.beat import schedule_errors
from jobs.models import Job, ScheduleError

pytestmark = pytest.mark.django_db


def _errors() -> dict[int, tuple[str, str]]:
    return {row.job_id: (row.error, row.beat) for row in ScheduleError.objects.all()}


def test_an_error_is_recorded_once_and_rewritten_only_when_it_changes(
    make_job: Callable[..., Job],
) -> None:
    job = make_job()
    schedule_errors.record({job.pk: "unknown time zone 'Mars/Olympus'"}, beat="beat-1")
    first = ScheduleError.objects.get(job=job)
    schedule_errors.record({job.pk: "unknown time zone 'Mars/Olympus'"}, beat="beat-2")
    unchanged = ScheduleError.objects.get(job=job)
    assert (unchanged.beat, unchanged.detected_at) == ("beat-1", first.detected_at)
    schedule_errors.record({job.pk: "a cron that never fires"}, beat="beat-2")
    assert _errors() == {job.pk: ("a cron that never fires", "beat-2")}


def test_a_job_deleted_meanwhile_is_left_out_and_nothing_is_a_no_op(
    make_job: Callable[..., Job],
) -> None:
    job = make_job()
    schedule_errors.record({job.pk + 1000: "gone"}, beat="beat-1")
    schedule_errors.record({}, beat="beat-1")
    assert _errors() == {}


def test_errors_are_cleared_by_job_or_all_but_the_broken(make_job: Callable[..., Job]) -> None:
    a, b, c = make_job("a"), make_job("b"), make_job("c")
    schedule_errors.record({a.pk: "x", b.pk: "y", c.pk: "z"}, beat="beat-1")
    schedule_errors.clear([a.pk])
    schedule_errors.clear([])
    assert set(_errors()) == {b.pk, c.pk}
    schedule_errors.clear_all_but([c.pk])
    assert set(_errors()) == {c.pk}
    schedule_errors.clear_all_but([])
    assert _errors() == {}


def test_a_stored_error_is_printable_and_bounded(make_job: Callable[..., Job]) -> None:
    job = make_job()
    schedule_errors.record({job.pk: "bad row: 'a\x00b' " + "x" * 5000}, beat="beat-1")
    error = ScheduleError.objects.get(job=job).error
    assert error.startswith("bad row: 'a\\x00b' ")
    assert len(error) == schedule_errors.MAX_ERROR_LENGTH


def test_an_error_reads_as_what_failed() -> None:
    assert schedule_errors.describe(ValueError("no slot in 5 years")) == "no slot in 5 years"
    assert schedule_errors.describe(KeyError("tz")) == "KeyError: 'tz'"
    assert schedule_errors.describe(ZeroDivisionError()) == "ZeroDivisionError: ZeroDivisionError"
