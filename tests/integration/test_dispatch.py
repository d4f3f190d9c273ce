"""Publishing runs and making the runs an operator asks for now (jobs.broker.dispatch), against real
PostgreSQL; the broker's publish is captured: a run is published once it is committed, a failed
publish leaves it scheduled, a run of an unregistered task is never sent, a continuous job is
never triggered, and an idempotency key makes one run per request."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import pytest
from django.utils import timezone

from jobs.broker import bulk_publish, dispatch, messages
from jobs.exceptions import IdempotencyKeyReused, NotTriggerable
from jobs.guard import run_records
from jobs.models import Job, JobRun, RunStatus, Trigger
from tests.integration.conftest import Published
from tests.support.job_factory import new_run

pytestmark = pytest.mark.django_db(transaction=True)


@dataclass
class Publishes:
    """What dispatch handed to ``messages.publish`` (run id, slot, options), captured instead
    of sent; a run in ``refused`` fails to publish, and every run while the broker is ``down``."""

    sent: list[tuple[int, datetime, dict[str, Any]]] = field(default_factory=list)
    refused: set[int] = field(default_factory=set)
    down: bool = False


@pytest.fixture
def publishes(monkeypatch: pytest.MonkeyPatch) -> Publishes:
    captured = Publishes()

    def publish(job: Job, run_id: int, scheduled_for: datetime, **options: Any) -> None:
        if captured.down or run_id in captured.refused:
            raise ConnectionError("broker down")
        captured.sent.append((run_id, scheduled_for, options))

    monkeypatch.setattr(messages, "publish", publish)
    return captured


def test_a_burst_is_more_than_a_hundred_runs_at_once() -> None:
    assert not dispatch.is_burst(dispatch.BURST_OVER)
    assert dispatch.is_burst(dispatch.BURST_OVER + 1)


def test_runs_are_published_one_by_one(make_job: Callable[..., Job], publishes: Publishes) -> None:
    job = make_job()
    runs = [new_run(job), new_run(job, ago=60)]
    count = dispatch.publish_many([(job, run.pk, run.scheduled_for) for run in runs])
    assert count == 2
    assert [(run_id, slot) for run_id, slot, _ in publishes.sent] == [
        (run.pk, run.scheduled_for) for run in runs
    ]


def test_a_failed_publish_is_logged_and_leaves_its_run_scheduled_for_maintenance(
    make_job: Callable[..., Job], publishes: Publishes, caplog: pytest.LogCaptureFixture
) -> None:
    job = make_job()
    lost, kept = new_run(job), new_run(job, ago=60)
    publishes.refused.add(lost.pk)
    with (
        caplog.at_level(logging.ERROR, logger="jobs.broker.dispatch"),
        dispatch.publishing() as publisher,
    ):
        publisher.add([(job, run.pk, run.scheduled_for) for run in (lost, kept)])
    assert publisher.sent == 1 and publisher.published == [kept.pk]
    assert [run_id for run_id, _, _ in publishes.sent] == [kept.pk]
    lost.refresh_from_db()
    assert lost.status == RunStatus.SCHEDULED
    (record,) = [r for r in caplog.records if getattr(r, "action", "") == "publish_failed"]
    assert record.run_id == lost.pk  # type: ignore[attr-defined]


def test_a_run_of_an_unregistered_task_is_never_sent_and_recorded_failed(
    make_job: Callable[..., Job], publishes: Publishes
) -> None:
    job = make_job()
    Job.objects.filter(pk=job.pk).update(task="os.system")  # written around validation
    job.refresh_from_db()
    run = new_run(job)
    with dispatch.publishing() as publisher:
        publisher.add([(job, run.pk, run.scheduled_for)])
    assert publisher.sent == 0 and publisher.published == [] and publishes.sent == []
    run.refresh_from_db()
    assert run.status == RunStatus.FAILED
    assert "'os.system' is not a registered job function or Celery task" in run.error


def test_a_retry_is_published_for_its_time_and_a_failed_publish_is_swallowed(
    make_job: Callable[..., Job], publishes: Publishes
) -> None:
    job = make_job()
    retry_run = new_run(job, ago=-30)
    retry = run_records.NewRun(
        run_id=retry_run.pk, job_id=job.pk, scheduled_for=retry_run.scheduled_for
    )
    dispatch.publish_retry(job, retry)
    assert publishes.sent == [
        (retry_run.pk, retry_run.scheduled_for, {"eta": retry_run.scheduled_for})
    ]
    publishes.refused.add(retry_run.pk)
    dispatch.publish_retry(job, retry)  # logged, not raised: maintenance re-publishes it
    assert len(publishes.sent) == 1


def test_trigger_now_records_a_run_for_now_and_publishes_it_once_committed(
    make_job: Callable[..., Job], published: Published
) -> None:
    job = make_job()
    run = dispatch.trigger_now(job, kwargs={"log": "/dev/null", "seconds": 0})
    assert (run.job_id, run.trigger, run.status) == (job.pk, Trigger.MANUAL, RunStatus.SCHEDULED)
    assert run.kwargs == {"log": "/dev/null", "seconds": 0}
    assert published == [(run.pk, None)]


def test_trigger_now_keeps_the_run_when_the_broker_is_down(
    make_job: Callable[..., Job], publishes: Publishes
) -> None:
    job = make_job()
    publishes.down = True
    run = dispatch.trigger_now(job)
    assert publishes.sent == []
    assert JobRun.objects.get(pk=run.pk).status == RunStatus.SCHEDULED


def test_a_continuous_job_is_never_triggered(
    make_job: Callable[..., Job], publishes: Publishes
) -> None:
    job = make_job("forever", task="tests.wait_for_stop", schedule=None)
    with pytest.raises(NotTriggerable, match="continuous job"):
        dispatch.trigger_now(job)
    with pytest.raises(NotTriggerable):
        dispatch.trigger_once(job, "key-1")
    assert not JobRun.objects.filter(job=job).exists() and publishes.sent == []


def test_a_request_digest_ignores_key_order_and_spacing_only() -> None:
    digest = dispatch.request_digest({"a": 1, "b": [1, 2]})
    assert digest == dispatch.request_digest({"b": [1, 2], "a": 1})
    assert digest != dispatch.request_digest({"a": 1, "b": [2, 1]})
    assert len(digest) == 64


def test_an_idempotency_key_makes_one_run_and_replays_it_for_the_same_request(
    make_job: Callable[..., Job], published: Published
) -> None:
    job = make_job()
    digest = dispatch.request_digest({"kwargs": {}})
    first, created = dispatch.trigger_once(job, "deploy-42", digest=digest)
    again, created_again = dispatch.trigger_once(job, "deploy-42", digest=digest)
    assert created and not created_again and again.pk == first.pk
    assert first.trigger == Trigger.API and first.idempotency_key == "deploy-42"
    assert published == [(first.pk, None)]
    with pytest.raises(IdempotencyKeyReused, match="deploy-42"):
        dispatch.trigger_once(job, "deploy-42", digest=dispatch.request_digest({"other": 1}))
    other_key, created_other = dispatch.trigger_once(job, "deploy-43", digest=digest)
    assert created_other and other_key.pk != first.pk


def test_a_run_kept_from_before_digests_is_replayed_whatever_the_request(
    make_job: Callable[..., Job], published: Published
) -> None:
    job = make_job()
    old, _ = dispatch.trigger_once(job, "legacy")  # no digest, as runs made before them
    replayed, created = dispatch.trigger_once(job, "legacy", digest="f" * 64)
    assert replayed.pk == old.pk and not created


def test_in_a_chunk_only_a_family_of_more_than_a_hundred_runs_goes_in_bulk(
    make_job: Callable[..., Job], publishes: Publishes, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The bulk decision is the chunk's and the job family's, not the tick's: a job due beside
    a burst of another family's runs is published one by one, as it would be alone."""
    in_bulk: list[int] = []
    monkeypatch.setattr(
        bulk_publish.Burst, "publish",
        lambda self, runs, shapes=None: in_bulk.extend(run.run_id for run in runs),
    )  # fmt: skip
    many = [make_job(name=f"many-{i}") for i in range(dispatch.BURST_OVER + 1)]
    alone = make_job(name="alone", queue="elsewhere")
    burst = [(job, new_run(job).pk, timezone.now()) for job in many]
    single = (alone, new_run(alone).pk, timezone.now())
    with dispatch.publishing() as publisher:
        publisher.add([*burst, single])
    assert sorted(in_bulk) == sorted(run_id for _, run_id, _ in burst)
    assert [run_id for run_id, _, _ in publishes.sent] == [single[1]]
