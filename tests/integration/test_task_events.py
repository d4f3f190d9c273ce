"""Lost runs announced to Flower on their dead worker's behalf (jobs.upkeep.task_events), against
real PostgreSQL: a ``task-failed`` event per run from the node that ran it, and an announcement
that fails never fails maintenance."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

import pytest
from celery import current_app
from django.utils import timezone

from jobs.exceptions import RunLost
from jobs.guard import run_records
from jobs.models import Job, JobRun, RunStatus, Trigger
from jobs.upkeep.recovery import recover_lost_runs
from tests.support.job_factory import new_run

pytestmark = pytest.mark.django_db(transaction=True)


class _Dispatcher:
    def __init__(self, hostname: str | None, sent: list[tuple[str | None, str, dict[str, Any]]]):
        self.hostname, self.sent = hostname, sent

    def send(self, type: str, **fields: Any) -> None:
        self.sent.append((self.hostname, type, fields))


def _lost_run(job: Job, node: str) -> JobRun:
    run = new_run(job, trigger=Trigger.MANUAL)
    claim = run_records.claim(run.pk, node=node, pid=1, task_id="t", holder=f"{node}:1:run")
    assert claim is not None and claim.lease is not None
    return run


def test_lost_runs_are_announced_to_flower_as_their_dead_workers(
    make_job: Callable[..., Job], monkeypatch: pytest.MonkeyPatch
) -> None:
    sent: list[tuple[str | None, str, dict[str, Any]]] = []

    @contextmanager
    def dispatcher(hostname: str | None = None, **_: Any) -> Iterator[_Dispatcher]:
        yield _Dispatcher(hostname, sent)

    monkeypatch.setattr(current_app.events, "default_dispatcher", dispatcher)
    a = _lost_run(make_job("a", lease_ttl=3), "w1@host")
    b = _lost_run(make_job("b", lease_ttl=3), "w2@host")
    later = timezone.now() + timedelta(seconds=30)

    assert sorted(recover_lost_runs(now=later)) == sorted([a.pk, b.pk])

    assert sorted((host, kind, fields["uuid"]) for host, kind, fields in sent) == [
        ("w1@host", "task-failed", f"jobrun-{a.pk}"),
        ("w2@host", "task-failed", f"jobrun-{b.pk}"),
    ]
    a.refresh_from_db()
    exceptions = {fields["uuid"]: fields["exception"] for _, _, fields in sent}
    assert exceptions[f"jobrun-{a.pk}"] == repr(RunLost(a.error))


def test_an_announcement_that_fails_never_fails_maintenance(
    make_job: Callable[..., Job], monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    @contextmanager
    def unreachable(**_: Any) -> Iterator[None]:
        raise ConnectionError("broker down")
        yield

    monkeypatch.setattr(current_app.events, "default_dispatcher", unreachable)
    run = _lost_run(make_job("a", lease_ttl=3), "w1@host")

    later = timezone.now() + timedelta(seconds=30)
    assert recover_lost_runs(now=later) == [run.pk]

    run.refresh_from_db()
    assert run.status == RunStatus.LOST
    assert any(r.__dict__.get("action") == "lost_event_failed" for r in caplog.records)
