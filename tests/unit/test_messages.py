"""A run's message (jobs.broker.messages): its task id, what it carries, how it is routed, and what
is handed to Celery to send it (captured here, no broker)."""

from __future__ import annotations

from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any

import pytest

import tests.support.jobs_under_test  # noqa: F401  (registers tests.record)
from jobs.broker import messages
from jobs.broker.messages import (
    message_headers,
    message_kwargs,
    run_id_of,
    task_id_for,
    wire_priority,
)
from jobs.models import Job

SLOT = datetime(2026, 11, 23, 22, 45, tzinfo=UTC)


class App:
    """The Celery app as messages sees it: its broker URL, and ``send_task`` captured."""

    def __init__(self, broker_url: str) -> None:
        self.conf = SimpleNamespace(broker_url=broker_url)
        self.sent: list[tuple[str, dict[str, Any]]] = []

    def send_task(self, name: str, **options: Any) -> None:
        self.sent.append((name, options))


@pytest.fixture
def app(monkeypatch: pytest.MonkeyPatch) -> App:
    fake = App("amqp://guest@localhost//")
    monkeypatch.setattr(messages, "current_app", fake)
    return fake


def test_a_task_id_names_its_run_and_only_such_ids_give_one_back() -> None:
    assert task_id_for(42) == "jobrun-42"
    assert run_id_of("jobrun-42") == 42
    for other in (None, "", "42", "jobrun-", "jobrun-4x", "jobrun-٤٢", "celery-uuid"):
        assert run_id_of(other) is None


def test_a_priority_means_the_same_on_redis_and_rabbitmq(app: App) -> None:
    assert (wire_priority(9), wire_priority(0)) == (9, 0)
    app.conf.broker_url = "redis://localhost:6379/0"
    assert (wire_priority(9), wire_priority(0)) == (0, 9)


def test_the_message_carries_the_run_the_job_and_the_slot() -> None:
    job = Job(name="nightly", task="tests.record")
    assert message_kwargs(job, 7, SLOT) == {
        "run_id": 7,
        "job": "nightly",
        "slot": "2026-11-23T22:45:00+00:00",
    }


def test_headers_are_the_jobs_without_celerys_own_and_an_adopted_row_names_itself() -> None:
    job = Job(name="nightly", task="tests.record", headers={"tenant": "eu", "task": "os.system"})
    assert message_headers(job) == {"tenant": "eu"}
    job.adopted = True
    assert message_headers(job) == {"tenant": "eu", "periodic_task_name": "nightly"}
    job.headers = ["not", "a", "mapping"]  # written around validation
    assert message_headers(job) == {"periodic_task_name": "nightly"}


def test_a_plain_jobs_message_is_routed_to_its_queue_under_its_task_id(
    app: App,
) -> None:
    job = Job(name="tests.record", task="tests.record", queue="reports")
    messages.publish(job, 7, SLOT)
    ((task, options),) = app.sent
    assert task == "tests.record"
    assert options == {
        "queue": "reports",
        "task_id": "jobrun-7",
        "kwargs": message_kwargs(job, 7, SLOT),
    }


def test_a_job_named_apart_from_its_task_and_its_policies_shape_the_message(
    app: App,
) -> None:
    expires = datetime(2100, 1, 1, tzinfo=UTC)
    job = Job(
        name="nightly", task="tests.record", queue="reports", priority=8, exchange="ex",
        routing_key="rk", headers={"tenant": "eu"}, expires_at=expires, time_limit=30,
    )  # fmt: skip
    messages.publish(job, 7, SLOT, producer="a producer", eta=SLOT)
    ((task, options),) = app.sent
    assert task == "tests.record"
    assert options["shadow"] == "nightly"
    assert {key: options[key] for key in ("priority", "exchange", "routing_key", "headers")} == {
        "priority": 8, "exchange": "ex", "routing_key": "rk", "headers": {"tenant": "eu"},
    }  # fmt: skip
    assert (options["expires"], options["time_limit"]) == (expires, 30)
    assert (options["producer"], options["eta"]) == ("a producer", SLOT)


def test_a_shadowed_messages_sent_event_carries_the_jobs_name(
    app: App,
) -> None:
    messages.publish(Job(name="nightly", task="tests.record"), 7, SLOT)
    ((_, options),) = app.sent
    dispatcher = options["event_dispatcher"]
    assert isinstance(dispatcher, messages._SentEventAs) and dispatcher.name == "nightly"
