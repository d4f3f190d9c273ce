"""Publishing runs, one at a time or in bursts, and making the runs an operator asks for now: the
broker is only a doorbell, the run row is the truth (``jobs.broker.messages`` makes the message)."""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import Any

from celery import current_app
from django.db import IntegrityError, transaction
from django.utils import timezone

from jobs import observers, registry
from jobs.broker import bulk_publish, messages
from jobs.conf import get_conf
from jobs.exceptions import IdempotencyKeyReused, NotTriggerable
from jobs.guard import run_records
from jobs.models import Job, JobKind, JobRun, Trigger

log = logging.getLogger(__name__)


# More runs than this at once are a burst: more than this of one shape in a chunk are published
# in bulk (see ``publishing``).
BURST_OVER = 100


def is_burst(count: int) -> bool:
    """Whether ``count`` runs at once are a burst."""
    return count > BURST_OVER


class Publishing:
    """Runs handed over chunk after chunk (``add``); ``sent`` counts the messages the broker
    took and ``published`` names their runs, both final once ``publishing``'s block ends."""

    def __init__(
        self,
        producer: Any,
        burst: bulk_publish.Burst | None,
        schedule_of: observers.ScheduleOf | None = None,
    ) -> None:
        self.producer = producer
        self.burst = burst
        self.schedule_of = schedule_of
        self._sent_one_by_one = 0
        self._handed: list[int] = []
        self._failed: set[int] = set()

    @property
    def sent(self) -> int:
        return self._sent_one_by_one + (self.burst.sent if self.burst is not None else 0)

    @property
    def published(self) -> list[int]:
        """The runs whose messages went out (a burst's: confirmed, on RabbitMQ)."""
        failed = self._failed | (self.burst.failed if self.burst is not None else set())
        return [run_id for run_id in self._handed if run_id not in failed]

    def add(self, runs: Iterable[tuple[Job, int, datetime]]) -> None:
        """Publish each run; one failed publish is logged and left for maintenance to
        re-publish."""
        publishable = []
        for job, run_id, scheduled_for in runs:
            if registry.is_registered(job.task):
                publishable.append((job, run_id, scheduled_for))
            else:
                _refuse_unregistered(job, run_id)
        self._handed += [run_id for _, run_id, _ in publishable]
        one_by_one = publishable
        if self.burst is not None and is_burst(len(publishable)):
            bulk, shapes, one_by_one = _by_family(publishable)
            if bulk:
                self.burst.publish(bulk, shapes)
        for job, run_id, scheduled_for in one_by_one:
            headers = None
            if self.schedule_of is not None:
                headers = observers.beat_headers(job.name, self.schedule_of(job))
            try:
                messages.publish(
                    job, run_id, scheduled_for, producer=self.producer, headers=headers
                )
            except Exception:
                self._failed.add(run_id)
                log.exception(
                    "publish failed; the run stays scheduled for maintenance to re-publish",
                    extra={"action": "publish_failed", "run_id": run_id, "job": job.name},
                )
            else:
                self._sent_one_by_one += 1


def _by_family(
    runs: list[tuple[Job, int, datetime]],
) -> tuple[list[bulk_publish.Publication], list[Any], list[tuple[Job, int, datetime]]]:
    """A chunk's runs of a family (``bulk_publish.family``) with more than ``BURST_OVER`` runs
    in it, to publish in bulk, with their shapes; and the others, one by one as any run: the
    decision is the chunk's and the family's, so a job due beside a burst of others is
    published as it would be alone."""
    groups: dict[tuple[Any, ...], list[tuple[bulk_publish.Publication, Any]]] = {}
    for run in runs:
        publication = bulk_publish.Publication(*run)
        shape = bulk_publish.shape_of(publication.job)
        groups.setdefault(bulk_publish.family(shape), []).append((publication, shape))
    bulk: list[bulk_publish.Publication] = []
    shapes: list[Any] = []
    one_by_one: list[tuple[Job, int, datetime]] = []
    for group in groups.values():
        if is_burst(len(group)):
            bulk += [publication for publication, _ in group]
            shapes += [shape for _, shape in group]
        else:
            one_by_one += [(p.job, p.run_id, p.scheduled_for) for p, _ in group]
    return bulk, shapes, one_by_one


@contextmanager
def publishing(
    producer: Any = None, *, schedule_of: observers.ScheduleOf | None = None
) -> Iterator[Publishing]:
    """Publish runs in chunks within the block: in a chunk, the runs of a shape with more than
    ``BURST_OVER`` runs go in bulk unless ``JOBS_BULK_PUBLISH`` is off
    (``jobs.broker.bulk_publish``: Celery's messages and ``task-sent`` events, at the broker's
    speed; on RabbitMQ one chunk's confirms are awaited while the next is made), every other run one
    by one. ``schedule_of`` (a beat's: each job's schedule): each run's message starts a trace of
    its own and carries its job's Crons check-in, as stock beat's (``jobs.observers``)."""
    if get_conf().bulk_publish:
        with (
            current_app.producer_or_acquire(producer) as acquired,
            bulk_publish.Burst(acquired, schedule_of=schedule_of) as bulk,
        ):
            yield Publishing(acquired, bulk, schedule_of)
    else:
        yield Publishing(producer, None, schedule_of)


def publish_many(runs: Iterable[tuple[Job, int, datetime]], producer: Any = None) -> int:
    """Publish each run (one chunk, see ``publishing``); the number sent."""
    with publishing(producer) as publisher:
        publisher.add(runs)
    return publisher.sent


def publish_retry(job: Job, retry: run_records.NewRun) -> None:
    """Publish a retry run for its time; a failed publish leaves it ``scheduled`` for
    maintenance to re-publish."""
    try:
        messages.publish(job, retry.run_id, retry.scheduled_for, eta=retry.scheduled_for)
    except Exception:
        log.exception(
            "publishing a retry failed; it stays scheduled for maintenance to re-publish",
            extra={"action": "publish_failed", "run_id": retry.run_id, "job": job.name},
        )
    else:
        log.info(
            "retry scheduled",
            extra={"action": "retry_scheduled", "run_id": retry.run_id, "job": job.name},
        )


def _refuse_unregistered(job: Job, run_id: int) -> None:
    # Only @job functions and the project's own Celery tasks are schedulable: a row naming
    # anything else (Celery's internal tasks, ``os.system``), written around validation, must
    # never be sent.
    error = (
        f"{job.task!r} is not a registered job function or Celery task: "
        "the run was not sent to any worker"
    )
    log.error(error, extra={"action": "unregistered_task", "run_id": run_id, "job": job.name})
    run_records.fail_unclaimed(run_id, node="", error=error)


def trigger_now(
    job: Job,
    trigger: Trigger = Trigger.MANUAL,
    idempotency_key: str = "",
    kwargs: dict[str, Any] | None = None,
    request_digest: str = "",
) -> JobRun:
    """Create a run of ``job`` for now, outside its schedule, and publish it after commit;
    with ``kwargs``, the run's own keyword arguments (validated by the caller, services).

    With an ``idempotency_key``, a second run with the same key for the same job violates
    ``one_run_per_idempotency_key`` and raises ``IntegrityError`` (see ``trigger_once``)."""
    _refuse_continuous(job)
    with transaction.atomic():
        run = JobRun.objects.create(
            job=job,
            scheduled_for=timezone.now(),
            trigger=trigger,
            idempotency_key=idempotency_key,
            kwargs=kwargs,
            request_digest=request_digest,
        )
        # A broker outage must not turn "run now" into an error after the run was recorded:
        # the run stays scheduled and maintenance re-publishes it.
        transaction.on_commit(lambda: publish_many([(job, run.pk, run.scheduled_for)]), robust=True)
    run.refresh_from_db()
    return run


def request_digest(request: Any) -> str:
    """The SHA-256 of a trigger's request (a JSON value), the same for the same value however
    its keys were ordered or spaced."""
    canonical = json.dumps(request, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode()).hexdigest()


def trigger_once(
    job: Job,
    idempotency_key: str,
    trigger: Trigger = Trigger.API,
    kwargs: dict[str, Any] | None = None,
    digest: str = "",
) -> tuple[JobRun, bool]:
    """The run of ``job`` made with ``idempotency_key``, created (and published) only if none
    exists yet; the flag says whether this call created it. The unique constraint decides, so
    two concurrent calls with one key make one run. A run made with the same key but another
    request (``digest``, see ``request_digest``) raises ``IdempotencyKeyReused``."""
    _refuse_continuous(job)
    existing = JobRun.objects.filter(job=job, idempotency_key=idempotency_key).first()
    if existing is None:
        try:
            run = trigger_now(
                job, trigger, idempotency_key=idempotency_key, kwargs=kwargs, request_digest=digest
            )
            return run, True
        except IntegrityError:
            # A concurrent call with the same key committed first: its run is the answer.
            existing = JobRun.objects.filter(job=job, idempotency_key=idempotency_key).first()
            if existing is None:
                raise
    # As the IETF's Idempotency-Key draft and Stripe do: a key is one request's, and a run kept
    # from before digests were (an empty one) is replayed as it always was.
    if existing.request_digest and existing.request_digest != digest:
        raise IdempotencyKeyReused(
            f"Idempotency-Key {idempotency_key!r} was already used for run {existing.pk} of "
            f"{job.name!r} with another request; send a new key for a new request"
        )
    return existing, False


def _refuse_continuous(job: Job) -> None:
    # A triggered run of a continuous job would run its loop a second time, outside the
    # supervisor that keeps it on exactly one node, and nothing would ever stop it.
    if job.kind == JobKind.CONTINUOUS:
        raise NotTriggerable(
            f"{job.name!r} is a continuous job: it already runs on one node; "
            "pause and resume it instead of triggering a run"
        )
