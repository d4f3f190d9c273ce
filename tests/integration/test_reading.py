"""Reading a run's log back (jobs.runlog.reading): lines after a cursor, the note of lines the
bounds cut, the next cursor, and whether the run finished (read before its lines)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime

import pytest

from jobs.exceptions import NotFound
from jobs.models import Job, JobRun, RunLogLine, RunStatus
from jobs.runlog.reading import page
from tests.support.job_factory import new_run

pytestmark = pytest.mark.django_db

AT = datetime(2030, 1, 1, tzinfo=UTC)


def _log(run: JobRun, *seqs: int) -> None:
    RunLogLine.objects.bulk_create(
        RunLogLine(run=run, seq=seq, at=AT, level="INFO", message=f"line {seq}") for seq in seqs
    )


@pytest.fixture
def run(make_job: Callable[..., Job]) -> JobRun:
    return new_run(make_job("talker"))


def test_lines_after_the_cursor_and_the_cursor_to_ask_with_next(run: JobRun) -> None:
    _log(run, 1, 2, 3)
    first = page(run.pk)
    assert [entry.message for entry in first.entries] == ["line 1", "line 2", "line 3"]
    assert (first.cursor, first.finished, first.status) == (3, False, RunStatus.SCHEDULED)

    _log(run, 4)
    assert [entry.seq for entry in page(run.pk, after=first.cursor).entries] == [4]
    assert page(run.pk, after=4).entries == () and page(run.pk, after=4).cursor == 4


def test_lines_cut_by_the_bounds_are_a_note_saying_how_many(run: JobRun) -> None:
    _log(run, 1, 2, 98, 99, 100)
    entries = page(run.pk).entries
    assert [(entry.seq, entry.level, entry.cut) for entry in entries] == [
        (1, "INFO", 0),
        (2, "INFO", 0),
        (None, "CUT", 95),
        (98, "INFO", 0),
        (99, "INFO", 0),
        (100, "INFO", 0),
    ]
    assert entries[2].text() == "[95 lines cut]"
    # A follower whose next lines were cut meanwhile is told so too.
    assert [entry.cut for entry in page(run.pk, after=50).entries] == [47, 0, 0, 0]


def test_a_full_page_says_more_follow_and_is_not_finished(run: JobRun) -> None:
    _log(run, 1, 2, 3)
    JobRun.objects.filter(pk=run.pk).update(status=RunStatus.SUCCEEDED)
    full = page(run.pk, limit=2)
    assert (full.cursor, full.more, full.finished) == (2, True, False)
    rest = page(run.pk, after=2, limit=2)
    assert (rest.cursor, rest.more, rest.finished) == (3, False, True)


def test_an_unknown_run_is_not_found() -> None:
    with pytest.raises(NotFound, match="no run with id 424242"):
        page(424242)


def test_the_record_is_json_ready(run: JobRun) -> None:
    _log(run, 1, 3)
    assert page(run.pk).record() == {
        "run": run.pk,
        "status": "scheduled",
        "lines": [
            {
                "seq": 1,
                "at": AT.isoformat(timespec="milliseconds"),
                "level": "INFO",
                "message": "line 1",
                "cut": 0,
            },
            {"seq": None, "at": None, "level": "CUT", "message": "[1 line cut]", "cut": 1},
            {
                "seq": 3,
                "at": AT.isoformat(timespec="milliseconds"),
                "level": "INFO",
                "message": "line 3",
                "cut": 0,
            },
        ],
        "cursor": 3,
        "finished": False,
    }
