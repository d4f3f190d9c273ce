"""The schedule change log (jobs.beat.changelog), against real PostgreSQL: the triggers append an
entry per edit, a beat reads the jobs edited after its position, learns when more waited than it
asked for, and maintenance prunes old entries without moving anyone's position."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

import pytest
from django.utils import timezone

from jobs import services
from jobs.audit import Actor
from jobs.beat import changelog
from jobs.models import Job, ScheduleChange

pytestmark = pytest.mark.django_db


def test_a_reader_after_the_newest_entry_sees_the_jobs_edited_since(
    make_job: Callable[..., Job],
) -> None:
    quiet = make_job("quiet")
    position = changelog.newest_id()
    assert changelog.read_after(position, limit=100) == changelog.Changes(
        newest_id=position, job_ids=frozenset(), periodic_task_ids=frozenset(), complete=True
    )
    edited = make_job("edited")
    services.pause("edited", actor=Actor.code("tests"))
    changes = changelog.read_after(position, limit=100)
    assert edited.pk in changes.job_ids and quiet.pk not in changes.job_ids
    assert changes.complete and changes.newest_id == changelog.newest_id() > position


def test_more_entries_than_the_limit_are_read_as_incomplete(
    make_job: Callable[..., Job],
) -> None:
    position = changelog.newest_id()
    for name in ("a", "b", "c"):
        make_job(name)
    waiting = ScheduleChange.objects.filter(id__gt=position).count()
    assert waiting >= 3
    first = changelog.read_after(position, limit=1)
    assert not first.complete and first.newest_id > position
    assert len(first.job_ids | first.periodic_task_ids) <= 1
    rest = changelog.read_after(first.newest_id, limit=waiting)
    assert rest.complete and rest.newest_id == changelog.newest_id()


def test_old_entries_are_pruned_and_positions_stay_valid(make_job: Callable[..., Job]) -> None:
    make_job("old")
    position = changelog.newest_id()
    ScheduleChange.objects.update(changed_at=timezone.now() - timedelta(hours=2))
    assert changelog.prune() >= 1
    assert not ScheduleChange.objects.exists()
    assert changelog.newest_id() == 0  # an empty log, yet ids never restart:
    fresh = make_job("fresh")
    changes = changelog.read_after(position, limit=100)
    assert fresh.pk in changes.job_ids and changes.newest_id > position
