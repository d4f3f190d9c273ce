"""The outbox's statements (jobs.alerts.outbox), against real PostgreSQL: which notifications are
due and in what order, how taking one hides it for its claim, and what each outcome records."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from datetime import timedelta

import pytest
from django.db import connection, transaction
from django.utils import timezone

from jobs.alerts import outbox
from jobs.guard.runner import execute_run
from jobs.models import AlertDelivery, Incident, IncidentKind, Job, JobRun, Trigger

pytestmark = pytest.mark.django_db(transaction=True)


def _run(job: Job) -> None:
    run = JobRun.objects.create(job=job, scheduled_for=timezone.now(), trigger=Trigger.MANUAL)
    execute_run(run.pk, task_id=f"jobrun-{run.pk}", node="n1")


@pytest.fixture
def incident(make_job: Callable[..., Job]) -> Incident:
    return Incident.objects.create(
        job=make_job("flaky"), kind=IncidentKind.FAILING, reason="failed"
    )


def _row(
    incident: Incident, event: str = "opened", channel: str = "webhook", **fields: object
) -> AlertDelivery:
    row = AlertDelivery.objects.create(incident=incident, event=event, channel=channel)
    if fields:
        AlertDelivery.objects.filter(pk=row.pk).update(**fields)
    row.refresh_from_db()
    return row


def test_any_due_sees_only_pending_rows_whose_time_has_come(incident: Incident) -> None:
    assert outbox.any_due() is False
    later = _row(incident, next_attempt_at=timezone.now() + timedelta(minutes=5))
    _row(incident, channel="email", state="delivered")
    assert outbox.any_due() is False
    AlertDelivery.objects.filter(pk=later.pk).update(next_attempt_at=timezone.now())
    assert outbox.any_due() is True


def test_take_due_takes_the_oldest_first_up_to_the_limit_and_counts_the_attempt(
    make_job: Callable[..., Job],
) -> None:
    now = timezone.now()
    rows = []
    for age, name in ((10, "a"), (30, "b"), (20, "c")):
        incident = Incident.objects.create(job=make_job(name), kind="failing", reason="failed")
        rows.append(_row(incident, next_attempt_at=now - timedelta(seconds=age)))
    taken = outbox.take_due(2, claim_for=60)
    # The two oldest (in no promised order: the sender takes one row at a time).
    assert {due.delivery_id for due in taken} == {rows[1].pk, rows[2].pk}
    assert all(due.attempts == 1 and due.event == "opened" for due in taken)
    assert {due.incident_id for due in taken} == {rows[1].incident_id, rows[2].incident_id}
    hidden = AlertDelivery.objects.get(pk=rows[1].pk)
    assert hidden.state == "pending" and hidden.attempts == 1
    assert hidden.next_attempt_at > timezone.now() + timedelta(seconds=50)
    assert [due.delivery_id for due in outbox.take_due(10, claim_for=60)] == [rows[0].pk]
    assert outbox.take_due(10, claim_for=60) == []


def test_a_resolution_waits_behind_its_opening_on_the_same_channel_only(
    incident: Incident,
) -> None:
    opened = _row(incident, next_attempt_at=timezone.now() + timedelta(minutes=5))
    resolved = _row(incident, event="resolved")
    by_email = _row(incident, event="resolved", channel="email")
    assert [due.delivery_id for due in outbox.take_due(10, claim_for=60)] == [by_email.pk]
    outbox.mark_delivered(opened.pk)
    assert [due.delivery_id for due in outbox.take_due(10, claim_for=60)] == [resolved.pk]


@pytest.fixture
def locked_elsewhere() -> Iterator[Callable[[int], None]]:
    """Lock a row from another connection, as a sender busy taking it would, until the test
    ends."""
    locked, done = threading.Event(), threading.Event()
    threads: list[threading.Thread] = []

    def lock(row_id: int) -> None:
        def hold() -> None:
            try:
                with transaction.atomic():
                    AlertDelivery.objects.select_for_update().get(pk=row_id)
                    locked.set()
                    done.wait()
            finally:
                connection.close()

        thread = threading.Thread(target=hold)
        thread.start()
        threads.append(thread)
        assert locked.wait(10)

    yield lock
    done.set()
    for thread in threads:
        thread.join()


def test_take_due_skips_a_row_another_sender_is_taking(
    make_job: Callable[..., Job], locked_elsewhere: Callable[[int], None]
) -> None:
    first = _row(Incident.objects.create(job=make_job("a"), kind="failing", reason="failed"))
    second = _row(Incident.objects.create(job=make_job("b"), kind="failing", reason="failed"))
    locked_elsewhere(first.pk)
    assert [due.delivery_id for due in outbox.take_due(10, claim_for=60)] == [second.pk]
    assert AlertDelivery.objects.get(pk=first.pk).attempts == 0


def test_mark_delivered_records_it_and_clears_the_last_error(incident: Incident) -> None:
    row = _row(incident, last_error="HTTP 500")
    outbox.mark_delivered(row.pk)
    row.refresh_from_db()
    assert (row.state, row.last_error) == ("delivered", "")
    assert row.delivered_at is not None


def test_mark_dropped_records_why(incident: Incident) -> None:
    row = _row(incident)
    outbox.mark_dropped(row.pk, "JOBS_ALERT_WEBHOOK_URL is not set")
    row.refresh_from_db()
    assert (row.state, row.last_error) == ("dropped", "JOBS_ALERT_WEBHOOK_URL is not set")
    assert row.delivered_at is None


def test_outcomes_change_only_pending_rows(incident: Incident) -> None:
    row = _row(incident, state="failed", last_error="gave up")
    outbox.mark_delivered(row.pk)
    outbox.mark_dropped(row.pk, "dropped")
    assert outbox.retry_later(row.pk, 3, "again") is None
    row.refresh_from_db()
    assert (row.state, row.last_error, row.delivered_at) == ("failed", "gave up", None)


def test_retry_later_keeps_the_error_and_waits_the_backoff(
    incident: Incident, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(outbox, "backoff", lambda attempts: 100.0 * attempts)
    row = _row(incident)
    before = timezone.now()
    assert outbox.retry_later(row.pk, 3, "HTTP 500 " + "x" * 3000) == "pending"
    row.refresh_from_db()
    assert row.state == "pending"
    assert row.last_error.startswith("HTTP 500") and len(row.last_error) == 2000
    assert (
        before + timedelta(seconds=290)
        < row.next_attempt_at
        < timezone.now() + timedelta(seconds=310)
    )
    assert not outbox.any_due()


def test_retry_later_gives_up_a_day_after_the_row_was_written(incident: Incident) -> None:
    row = _row(incident, created_at=timezone.now() - outbox.GIVE_UP_AFTER - timedelta(minutes=1))
    assert outbox.retry_later(row.pk, 20, "HTTP 503") == "failed"
    row.refresh_from_db()
    assert (row.state, row.last_error) == ("failed", "HTTP 503")
    assert outbox.take_due(10, claim_for=60) == []


@pytest.mark.parametrize(
    ("attempts", "base"),
    [(0, 1.0), (1, 1.0), (2, 2.0), (4, 8.0), (9, 256.0), (10, 300.0), (50, 300.0)],
)
def test_backoff_doubles_per_attempt_up_to_its_cap_within_ten_percent(
    attempts: int, base: float
) -> None:
    for _ in range(50):
        assert base * 0.9 <= outbox.backoff(attempts) <= base * 1.1


def test_a_row_taken_by_a_sender_that_died_is_retried_after_its_claim(
    make_job: Callable[..., Job], alerts_to: Callable[..., None]
) -> None:
    alerts_to()
    _run(make_job("flaky", task="tests.fail", alert_channels="email"))
    (taken,) = outbox.take_due(10, claim_for=60)
    assert outbox.take_due(10, claim_for=60) == []  # hidden while its sender works on it
    AlertDelivery.objects.update(next_attempt_at=timezone.now())  # the claim lapsed
    (again,) = outbox.take_due(10, claim_for=60)
    assert (again.delivery_id, again.attempts) == (taken.delivery_id, 2)
