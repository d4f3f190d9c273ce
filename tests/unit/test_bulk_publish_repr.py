"""A burst's ``kwargsrepr`` header is composed from cached parts (``jobs.broker.bulk_publish``)
instead of Celery's ``saferepr`` of the whole, and on RabbitMQ its JSON body from the text around
the run's keyword arguments instead of kombu's serializer: for every job name a job may have and
every slot, each must be the same string, or a bulk message would differ from ``send_task``'s."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import kombu.serialization
from celery.utils.saferepr import saferepr
from hypothesis import given, settings
from hypothesis import strategies as st

from jobs.broker.bulk_publish import _composed_body, _kwargs_repr
from jobs.models import Job

NAME_LIMIT = Job._meta.get_field("name").max_length
CELERY_REPR_LIMIT = 1024  # celery.app.amqp.AMQP.kwargsrepr_maxsize


@settings(max_examples=2000, deadline=None)
@given(
    run_id=st.integers(min_value=1, max_value=2**63 - 1),
    name=st.text(min_size=1, max_size=NAME_LIMIT),
    seconds=st.integers(min_value=0, max_value=10**9),
    microseconds=st.integers(min_value=0, max_value=999_999),
)
def test_the_composed_repr_is_celerys(
    run_id: int, name: str, seconds: int, microseconds: int
) -> None:
    slot = datetime(2000, 1, 1, tzinfo=UTC) + timedelta(seconds=seconds, microseconds=microseconds)
    kwargs = {"run_id": run_id, "job": name, "slot": slot.isoformat()}
    assert _kwargs_repr(kwargs) == saferepr(kwargs, CELERY_REPR_LIMIT)


# Celery's own embed part of a task message body (callbacks, errbacks, chain, chord).
EMBED = {"callbacks": None, "errbacks": None, "chain": None, "chord": None}


@settings(max_examples=2000, deadline=None)
@given(
    run_id=st.integers(min_value=1, max_value=2**63 - 1),
    name=st.text(min_size=1, max_size=NAME_LIMIT),
    args=st.lists(st.integers() | st.text(max_size=5), max_size=2),
)
def test_the_composed_body_is_kombus(run_id: int, name: str, args: list[object]) -> None:
    kwargs = {"run_id": run_id, "job": name, "slot": "2026-11-26T12:00:00+00:00"}
    _, _, kombus = kombu.serialization.dumps((args, kwargs, EMBED), serializer="json")
    around = (f"[{json.dumps(args)}, ", f", {json.dumps(EMBED)}]")
    assert _composed_body(around, kwargs) == kombus
