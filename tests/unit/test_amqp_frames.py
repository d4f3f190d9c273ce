"""A RabbitMQ burst's frames (jobs.broker.amqp_frames) are the bytes py-amqp writes for the same
messages: the properties encoder against ``amqp.Message._serialize_properties`` on generated
messages (one encoder for a whole sequence, so its reuse of what it encoded last is tried on values
that change, repeat and change type), and a buffered channel's one write against py-amqp's
writes."""

from __future__ import annotations

import uuid
from decimal import Decimal
from types import SimpleNamespace
from typing import Any

import amqp
import pytest
from amqp import spec
from amqp.method_framing import frame_writer
from amqp.serialization import dumps
from hypothesis import given, settings
from hypothesis import strategies as st
from kombu.transport.pyamqp import Channel as KombuChannel

from jobs.broker.amqp_frames import BufferedPublishing, MessageFrames, PropertiesEncoder

# Values a header may hold, with the ones equal across types (0, 0.0, False; 1, True) that
# encode differently, and those nested in lists and tables.
_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.sampled_from([0, 1, 0.0, 1.0, False, True, "", "1"]),
    st.floats(allow_nan=False),
    st.text(max_size=40),
    st.binary(max_size=20),
    st.decimals(places=2, min_value=-1000, max_value=1000),
)
_values = st.recursive(
    _scalars,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=6,
)
# A small set of header names, so that a sequence repeats names with other values.
_headers = st.dictionaries(
    st.sampled_from(["id", "task", "retries", "eta", "stamps", "ü"]), _values
)
_properties = st.fixed_dictionaries(
    {},
    optional={
        "content_type": st.sampled_from(["application/json", "application/x-python-serialize"]),
        "content_encoding": st.sampled_from(["utf-8", "binary"]),
        "application_headers": _headers,
        "delivery_mode": st.sampled_from([1, 2]),
        "priority": st.integers(min_value=0, max_value=255),
        "correlation_id": st.sampled_from(["a", "b"]) | st.uuids().map(str),
        "reply_to": st.sampled_from(["", "reply"]),
        "expiration": st.sampled_from(["1000", "60000"]),
        "message_id": st.text(max_size=10),
        "timestamp": st.integers(min_value=0, max_value=2**40),
        "type": st.text(max_size=5),
        "user_id": st.sampled_from(["guest"]),
        "app_id": st.text(max_size=5),
        "cluster_id": st.text(max_size=5),
    },
)


def _py_amqp(properties: dict[str, Any]) -> bytes:
    """The properties as py-amqp encodes them."""
    message: Any = amqp.Message("", **properties)
    return bytes(message._serialize_properties())


def _valid(properties: dict[str, Any]) -> bool:
    """Whether py-amqp encodes these (a short string is at most 255 bytes)."""
    try:
        _py_amqp(properties)
    except Exception:
        return False
    return True


@settings(max_examples=300, deadline=None)
@given(st.lists(_properties, min_size=1, max_size=8))
def test_the_encoder_writes_py_amqps_bytes_for_a_sequence_of_messages(
    sequence: list[dict[str, Any]],
) -> None:
    encoder = PropertiesEncoder()
    for properties in filter(_valid, sequence):
        expected = _py_amqp(properties)
        assert encoder.encode(properties) == expected, properties


def test_equal_values_of_other_types_are_encoded_again() -> None:
    encoder = PropertiesEncoder()
    values = [1, True, 1.0, Decimal("1"), "1", b"1", 1, [1], [True], (1,), {"a": 1}, {"a": True}]
    for value in [*values, "\ud800", "é" * 300, [1], {"a": 1}]:
        properties = {"application_headers": {"x": value}, "priority": 1}
        expected = _py_amqp(properties)
        assert encoder.encode(properties) == expected, value


@pytest.mark.parametrize(
    "properties",
    [
        {"application_headers": {"k" * 256: "v"}},  # a key longer than a short string
        {"correlation_id": "é" * 200},  # 400 bytes: too long for a short string
        {"application_headers": {"k": object()}},  # no AMQP type
    ],
)
def test_what_py_amqp_cannot_encode_fails_as_in_py_amqp(properties: dict[str, Any]) -> None:
    with pytest.raises(Exception) as expected:
        _py_amqp(properties)
    with pytest.raises(expected.type):
        PropertiesEncoder().encode(properties)


def _celery_headers(n: int) -> dict[str, Any]:
    task_id = str(uuid.uuid4())
    return {
        "lang": "py", "task": "jobs.run", "id": task_id, "shadow": f"job-{n % 3}", "eta": None,
        "expires": None, "group": None, "group_index": None, "retries": 0,
        "timelimit": [None, 30], "root_id": task_id, "parent_id": None, "argsrepr": "()",
        "kwargsrepr": f"{{'run_id': {n}}}", "origin": "gen1@host", "ignore_result": False,
        "stamped_headers": None, "stamps": {},
    }  # fmt: skip


class _Transport:
    def __init__(self) -> None:
        self.writes: list[bytes] = []

    def write(self, data: Any) -> None:
        self.writes.append(bytes(data))


def _connection(frame_max: int) -> Any:
    def drain_events(timeout: float | None = None) -> None:
        raise TimeoutError()

    return SimpleNamespace(
        frame_max=frame_max, transport=_Transport(), drain_events=drain_events, bytes_sent=0
    )


@pytest.mark.parametrize("frame_max", [131072, 4096])  # 4096: bodies split over frames
def test_a_buffered_chunk_is_py_amqps_frames_in_one_write(frame_max: int) -> None:
    connection = _connection(frame_max)
    channel: Any = SimpleNamespace(connection=connection, channel_id=3)
    channel.prepare_message = KombuChannel.prepare_message.__get__(channel)
    publishing = BufferedPublishing(channel)

    expected = _Transport()
    write_frame = frame_writer(_connection(frame_max), expected)
    for n in range(50):
        body = (b'[[], {"run_id": %d}, {}]' % n) * (1 if n % 2 else 400)
        headers = _celery_headers(n)
        properties = {"correlation_id": headers["id"], "reply_to": "", "delivery_mode": 2}
        message = channel.prepare_message(
            body, n % 10, "application/json", "utf-8", headers, properties
        )
        channel.basic_publish(message, exchange="jobs", routing_key="q", mandatory=False)
        reference = amqp.Message(
            body, priority=n % 10, content_type="application/json", content_encoding="utf-8",
            application_headers=headers, **properties,
        )  # fmt: skip
        write_frame(
            1, 3, spec.Basic.Publish, dumps("Bssbb", (0, "jobs", "q", False, False)), reference
        )

    assert connection.transport.writes == []  # nothing sent before the flush
    publishing.flush()
    assert connection.transport.writes == [b"".join(expected.writes)]
    publishing.flush()  # nothing buffered: nothing written
    assert len(connection.transport.writes) == 1


# --- compiled frames (MessageFrames) ------------------------------------------------------------

_ARGUMENTS = dumps("Bssbb", (0, "jobs", "q", False, False))
_OPEN_TEXT = st.text(max_size=300)  # long enough to pass a short string's 255 bytes


def _reference(body: bytes, properties: dict[str, Any], frame_max: int) -> bytes:
    """py-amqp's frames for the message, from its own frame writer."""
    written = _Transport()
    message = amqp.Message(body, **properties)
    frame_writer(_connection(frame_max), written)(1, 5, spec.Basic.Publish, _ARGUMENTS, message)
    return b"".join(written.writes)


def _filled(
    properties: dict[str, Any], open_properties: dict[str, str], open_headers: dict[str, str],
    values: dict[str, str],
) -> dict[str, Any]:  # fmt: skip
    filled = {**properties, **{name: values[v] for name, v in open_properties.items()}}
    headers = dict(properties.get("application_headers") or {})
    headers.update({key: values[v] for key, v in open_headers.items()})
    if headers or "application_headers" in properties:
        filled["application_headers"] = headers
    return filled


@settings(max_examples=200, deadline=None)
@given(
    properties=_properties,
    opened=st.data(),
    messages=st.lists(
        st.tuples(st.binary(max_size=9000), _OPEN_TEXT, _OPEN_TEXT), min_size=1, max_size=6
    ),
    frame_max=st.sampled_from([4096, 131072]),
)
def test_compiled_frames_are_py_amqps_for_every_message_of_the_shape(
    properties: dict[str, Any], opened: st.DataObject,
    messages: list[tuple[bytes, str, str]], frame_max: int,
) -> None:  # fmt: skip
    """Open fields drawn from the sample's string properties and headers, filled per message
    with new text (unicode, and past a short string's limit, where both must fail alike)."""
    headers = properties.get("application_headers") or {}
    short = [name for name, kind in amqp.Message.PROPERTIES if kind == "s" and name in properties]
    names = opened.draw(st.lists(st.sampled_from(short), unique=True)) if short else []
    keys = opened.draw(st.lists(st.sampled_from(sorted(headers)), unique=True)) if headers else []
    open_properties = {name: opened.draw(st.sampled_from(["a", "b"])) for name in names}
    open_headers = {key: opened.draw(st.sampled_from(["a", "b"])) for key in keys}
    first_values = {"a": "first-a", "b": "first-b"}
    sample_properties = _filled(properties, open_properties, open_headers, first_values)
    if not _valid(sample_properties):
        return
    sample = amqp.Message(b"sample", **sample_properties)
    compiled = MessageFrames.compile(
        sample, channel_id=5, frame_max=frame_max, arguments=_ARGUMENTS,
        open_properties=open_properties, open_headers=open_headers, values=first_values,
        body=b"sample",
    )  # fmt: skip
    assert compiled is not None
    for body, a, b in messages:
        values = {"a": a, "b": b}
        filled = _filled(properties, open_properties, open_headers, values)
        try:
            expected = _reference(body, filled, frame_max)
        except Exception as refused:
            with pytest.raises(type(refused)):
                compiled.frames(body, values)
        else:
            assert compiled.frames(body, values) == expected


def test_a_shape_it_cannot_reproduce_is_not_compiled() -> None:
    """Open fields that are not text, or a text body without a content encoding (py-amqp would
    add one), leave the message to py-amqp's own path."""
    kwargs: dict[str, Any] = {
        "channel_id": 1, "frame_max": 131072, "arguments": _ARGUMENTS, "open_properties": {},
        "body": b"x",
    }  # fmt: skip
    numbers = amqp.Message(b"x", application_headers={"retries": 0})
    assert (
        MessageFrames.compile(numbers, open_headers={"retries": "a"}, values={"a": "0"}, **kwargs)
        is None
    )
    text = amqp.Message("x", application_headers={"id": "t"})
    assert (
        MessageFrames.compile(text, open_headers={"id": "a"}, values={"a": "t"}, **kwargs) is None
    )
    text.properties["content_encoding"] = "utf-8"
    assert MessageFrames.compile(text, open_headers={"id": "a"}, values={"a": "t"}, **kwargs)
