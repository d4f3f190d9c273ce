"""A RabbitMQ burst's messages written as py-amqp writes them, at a fraction of its cost.

Publishing through kombu and py-amqp costs ~125 µs a message on this project's machines, and a
profile of a burst puts most of it in three places: encoding each message's header table in
Python (half of it: a Celery message carries some twenty headers, of which three change from
one run to the next), one ``send`` system call per message, and a poll of the socket before each
publish for a ``connection.blocked`` notice. Here, on a confirm channel of the burst's own:

- ``PropertiesEncoder`` encodes a message's properties to the very bytes py-amqp's
  ``Message._serialize_properties`` makes (``tests/unit/test_amqp_frames.py`` checks them on
  generated messages), reusing the bytes of each property and header whose value is the one it
  encoded last (the task, the queue, the content type...), and encoding the rest as py-amqp does.
- ``BufferedPublishing`` makes the channel's ``basic_publish`` frame each message with py-amqp's
  own frame writer into a buffer, and ``flush`` sends a chunk's frames in one write. The socket
  is polled once per chunk instead of once per message.
- ``MessageFrames`` goes further for messages of one shape (a burst's template): the frames of
  one message py-amqp framed, compiled once into constant bytes and the few string properties and
  headers each message fills in (the task id, the arguments' repr, the display name). A message
  then costs a few string encodings and one join, not kombu's publish and py-amqp's framing. It
  checks itself against py-amqp's frames of the message it was compiled from, and refuses to
  compile when they differ, so the caller keeps py-amqp's path.

The channel is the burst's alone and the beat holds its connection for the tick (taken from the
producer pool), so nothing else writes on it between a chunk's first publish and its flush.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import lru_cache
from struct import pack
from types import SimpleNamespace
from typing import Any

import amqp
from amqp import spec
from amqp.method_framing import frame_writer
from amqp.serialization import dumps

# Values whose equality is their encoding's: a cached encoding is reused for a value of exactly
# one of these types equal to the one encoded (1 == 1.0 == True, each encoded differently).
_SCALARS = (str, bytes, int, float, bool, type(None))
# Containers are compared by their repr, which tells those apart ([1] and [True] are equal).
_CONTAINERS = (list, tuple, dict)


# What ``_Encodings.find`` returns for a value of another type: its encoding is never reused.
_NEVER_REUSED = object()


class _Encodings:
    """The last value seen under each name, and its encoding."""

    def __init__(self) -> None:
        self._last: dict[Any, tuple[type, Any, bytes]] = {}

    def find(self, name: Any, value: Any) -> tuple[Any, bytes | None]:
        """What identifies ``value`` (``_NEVER_REUSED`` for a value of another type) and, when
        it is the value encoded last under ``name``, that encoding."""
        kind = type(value)
        if kind in _CONTAINERS:
            identity = repr(value)
        elif kind in _SCALARS:
            identity = value
        else:
            return _NEVER_REUSED, None
        last = self._last.get(name)
        if last is not None and last[0] is kind and last[1] == identity:
            return identity, last[2]
        return identity, None

    def keep(self, name: Any, value: Any, identity: Any, encoded: bytes) -> bytes:
        if identity is not _NEVER_REUSED:
            self._last[name] = (type(value), identity, encoded)
        return encoded


def _short_string(value: str) -> bytes | None:
    """A short string as ``dumps("s", ...)`` writes it, or None when it is not one (too long:
    py-amqp's own encoding then raises its error)."""
    encoded = value.encode("utf-8", "surrogatepass")
    return pack("B", len(encoded)) + encoded if len(encoded) < 256 else None


def _flags_and_present(properties: Mapping[str, Any]) -> tuple[bytes, list[tuple[str, str, Any]]]:
    """py-amqp's property flags for ``properties``, and the properties its list holds (name,
    kind, value), in the order of ``amqp.Message.PROPERTIES`` (``_serialize_properties``' loop:
    a flag per property present, fifteen to a word)."""
    shift, flag_bits, flags, present = 15, 0, [], []
    for name, kind in amqp.Message.PROPERTIES:
        value = properties.get(name)
        if value is not None:
            if shift == 0:
                flags.append(flag_bits)
                flag_bits, shift = 0, 15
            flag_bits |= 1 << shift
            if kind != "bit":
                present.append((name, kind, value))
        shift -= 1
    flags.append(flag_bits)
    return b"".join(pack(">H", bits) for bits in flags), present


class PropertiesEncoder:
    """Encodes AMQP basic properties byte for byte as ``amqp.Message._serialize_properties``."""

    def __init__(self) -> None:
        self._properties = _Encodings()
        self._headers = _Encodings()

    def encode(self, properties: dict[str, Any]) -> bytes:
        flags, present = _flags_and_present(properties)
        return b"".join([flags, *(self._property(*item) for item in present)])

    def _property(self, name: str, kind: str, value: Any) -> bytes:
        if kind == "F":
            return self._table(value)
        identity, cached = self._properties.find(name, value)
        if cached is not None:
            return cached
        if kind == "s" and type(value) is str:  # a task id: new in every message
            fast = _short_string(value)
            if fast is not None:
                return self._properties.keep(name, value, identity, fast)
        # dumps writes each value of its list in turn (no bit fields among the properties), so
        # one value encoded alone is its piece of the whole.
        return self._properties.keep(name, value, identity, dumps(kind, (value,)))

    def _table(self, table: dict[str, Any]) -> bytes:
        items = []
        find, keep = self._headers.find, self._headers.keep
        for key, value in table.items():
            identity, cached = find(key, value)
            if cached is None:
                cached = keep(key, value, identity, self._item(key, value))
            items.append(cached)
        body = b"".join(items)
        return pack(">I", len(body)) + body

    def _item(self, key: str, value: Any) -> bytes:
        if type(value) is str and type(key) is str:  # a task id, a repr: new in every message
            name = _short_string(key)
            if name is not None:
                encoded = value.encode("utf-8", "surrogatepass")
                return name + pack(">cI", b"S", len(encoded)) + encoded
        # A table of this one item, without the table's length: the item as the whole table
        # encodes it.
        return dumps("F", ({key: value},))[4:]


class _Message(amqp.Message):
    """A message whose properties the burst's encoder encodes."""

    __slots__ = ("encoder",)
    encoder: PropertiesEncoder

    def _serialize_properties(self) -> bytes:
        return self.encoder.encode(self.properties)


class FrameBuffer:
    """A transport stand-in for py-amqp's frame writer: keeps what it would send."""

    def __init__(self) -> None:
        self._pending: list[bytes] = []

    def write(self, data: Any) -> None:
        self._pending.append(bytes(data))  # the writer reuses its buffer: copy the frames out

    def take(self) -> bytes:
        """Everything written since the last ``take``, in order."""
        data, self._pending = b"".join(self._pending), []
        return data


@lru_cache(maxsize=1024)
def publish_arguments(
    exchange: str, routing_key: str, mandatory: bool = False, immediate: bool = False
) -> bytes:
    """``basic.publish``'s arguments as py-amqp's ``Channel._basic_publish`` encodes them (the
    same few for every message of a job shape)."""
    return dumps("Bssbb", (0, exchange, routing_key, mandatory, immediate))


def _frame(kind: int, channel_id: int, payload: bytes) -> bytes:
    return pack(">BHI", kind, channel_id, len(payload)) + payload + b"\xce"


@dataclass(frozen=True, slots=True)
class _Short:
    """An open short-string property: the name of the value that fills it."""

    name: str


@dataclass(frozen=True, slots=True)
class _Table:
    """The header table: constant bytes, and the names of the values that fill its open long
    strings (each after its constant key)."""

    items: list[bytes | str]


_Piece = bytes | _Short | _Table


class MessageFrames:
    """The frames py-amqp writes for messages like ``sample`` on one channel (``frame_writer``:
    method, header and body frames), compiled: everything constant is encoded once, and the
    string properties named in ``open_properties`` and headers named in ``open_headers`` are
    filled per message from the values named there (``frames``). Build with ``compile``."""

    def __init__(
        self,
        sample: amqp.Message,
        *,
        channel_id: int,
        frame_max: int,
        arguments: bytes,
        open_properties: Mapping[str, str],
        open_headers: Mapping[str, str],
    ) -> None:
        self._channel_id = channel_id
        self._chunk = frame_max - 8
        self.encoding = sample.properties.get("content_encoding") or "utf-8"  # a text body's
        method = pack(">HH", *spec.Basic.Publish) + arguments
        self._method = _frame(1, channel_id, method)
        self._header_prefix = pack(">BHI", 2, channel_id, 0)[:3]  # the frame's type and channel
        self._pieces = self._compile(sample.properties, open_properties, open_headers)

    @classmethod
    def compile(
        cls,
        sample: amqp.Message,
        *,
        channel_id: int,
        frame_max: int,
        arguments: bytes,
        open_properties: Mapping[str, str],
        open_headers: Mapping[str, str],
        values: Mapping[str, str],
        body: bytes,
    ) -> MessageFrames | None:
        """The compiled frames, or None unless they make, from ``body`` and ``values`` (the
        caller's own for the sample's run), the frames py-amqp writes for ``sample``: open
        fields that are not strings, a body the caller makes otherwise, or anything else this
        compiler does not reproduce."""
        opened = [*open_properties, *open_headers]
        properties = sample.properties
        headers = properties.get("application_headers") or {}
        kinds = dict(amqp.Message.PROPERTIES)
        if any(kinds.get(name) != "s" for name in open_properties) or not all(
            type(value) is str for value in values.values()
        ):
            return None
        if any(
            type(properties.get(name) if name in open_properties else headers.get(name)) is not str
            for name in opened
        ):
            return None
        try:
            frames = cls(
                sample, channel_id=channel_id, frame_max=frame_max, arguments=arguments,
                open_properties=open_properties, open_headers=open_headers,
            )  # fmt: skip
            ours = frames.frames(body, values)
        except Exception:
            return None
        return frames if ours == py_amqp_frames(sample, channel_id, frame_max, arguments) else None

    def _compile(
        self,
        properties: Mapping[str, Any],
        open_properties: Mapping[str, str],
        open_headers: Mapping[str, str],
    ) -> list[_Piece]:
        flags, present = _flags_and_present(properties)
        pieces: list[_Piece] = [flags]
        for name, kind, value in present:
            if name in open_properties:
                pieces.append(_Short(open_properties[name]))
            elif kind == "F":
                pieces.append(_Table(self._compile_table(value, open_headers)))
            else:
                pieces.append(dumps(kind, (value,)))
        return _merged(pieces)

    @staticmethod
    def _compile_table(
        table: Mapping[str, Any], open_headers: Mapping[str, str]
    ) -> list[bytes | str]:
        pieces: list[bytes | str] = []
        for key, value in table.items():
            if key in open_headers:
                pieces.append(dumps("s", (key,)) + b"S")
                pieces.append(open_headers[key])
            else:
                pieces.append(dumps("F", ({key: value},))[4:])
        return _merged(pieces)

    def frames(self, body: bytes, values: Mapping[str, str]) -> bytes:
        """One message's frames: ``body``, and its open fields filled from ``values``."""
        out: list[bytes] = []
        for piece in self._pieces:
            if isinstance(piece, bytes):
                out.append(piece)
            elif isinstance(piece, _Short):
                encoded = values[piece.name].encode("utf-8", "surrogatepass")
                out.append(pack("B", len(encoded)))
                out.append(encoded)
            else:
                table: list[bytes] = []
                for item in piece.items:
                    if isinstance(item, bytes):
                        table.append(item)
                    else:
                        encoded = values[item].encode("utf-8", "surrogatepass")
                        table.append(pack(">I", len(encoded)))
                        table.append(encoded)
                content = b"".join(table)
                out.append(pack(">I", len(content)))
                out.append(content)
        header = pack(">HHQ", spec.Basic.Publish[0], 0, len(body)) + b"".join(out)
        frames = [self._method, self._header_prefix, pack(">I", len(header)), header, b"\xce"]
        chunk, channel_id = self._chunk, self._channel_id
        for start in range(0, len(body), chunk):
            frames.append(_frame(3, channel_id, body[start : start + chunk]))
        return b"".join(frames)


def _merged(pieces: list[Any]) -> list[Any]:
    """``pieces`` with each run of constant bytes joined into one."""
    merged: list[Any] = []  # of the pieces' own type
    for piece in pieces:
        if isinstance(piece, bytes) and merged and isinstance(merged[-1], bytes):
            merged[-1] += piece
        else:
            merged.append(piece)
    return merged


def py_amqp_frames(
    message: amqp.Message, channel_id: int, frame_max: int, arguments: bytes
) -> bytes:
    """What py-amqp's frame writer sends for ``message`` published with ``arguments``."""
    plain = amqp.Message(message.body, **message.properties)  # py-amqp's own encoding
    frames = FrameBuffer()
    connection = SimpleNamespace(frame_max=frame_max, bytes_sent=0)
    frame_writer(connection, frames)(1, channel_id, spec.Basic.Publish, arguments, plain)
    return frames.take()


class BufferedPublishing:
    """Makes ``channel`` (kombu's py-amqp channel, the burst's own) buffer its publishes until
    ``flush``, with its messages' properties encoded by a ``PropertiesEncoder``."""

    def __init__(self, channel: Any) -> None:
        self._channel = channel
        self._connection = channel.connection  # py-amqp's
        self._frames = FrameBuffer()
        self._write_frame = frame_writer(self._connection, self._frames)
        self._encoder = PropertiesEncoder()
        self._capturing: list[tuple[amqp.Message, bytes]] | None = None
        kombu_prepare = channel.prepare_message

        def prepare_message(*args: Any, **kwargs: Any) -> amqp.Message:
            message = kombu_prepare(*args, _Message=_Message, **kwargs)
            message.encoder = self._encoder
            return message

        # On this channel only (instance attributes): kombu's Producer calls both.
        channel.prepare_message = prepare_message
        channel.basic_publish = self._publish

    def capture(self, publish: Callable[[], None]) -> tuple[amqp.Message, bytes]:
        """The message ``publish`` hands this channel, and its ``basic.publish`` arguments,
        kept instead of sent."""
        captured: list[tuple[amqp.Message, bytes]] = []
        self._capturing = captured
        try:
            publish()
        finally:
            self._capturing = None
        [(message, arguments)] = captured
        return message, arguments

    def add(self, frames: bytes) -> None:
        """Frames made elsewhere (``MessageFrames``), sent with the next ``flush``."""
        self._frames.write(frames)
        self._connection.bytes_sent += 1  # as py-amqp's frame writer counts a message (heartbeats)

    @property
    def channel_id(self) -> int:
        return int(self._channel.channel_id)

    @property
    def frame_max(self) -> int:
        return int(self._connection.frame_max)

    def _publish(
        self,
        message: amqp.Message,
        exchange: str = "",
        routing_key: str = "",
        mandatory: bool = False,
        immediate: bool = False,
        **_timeouts: Any,
    ) -> None:
        # As py-amqp's Channel._basic_publish frames it (send_method's arguments), minus the
        # poll before each message and the write.
        arguments = publish_arguments(exchange, routing_key, mandatory, immediate)
        if self._capturing is not None:
            self._capturing.append((message, arguments))
            return
        self._write_frame(1, self._channel.channel_id, spec.Basic.Publish, arguments, message)

    def flush(self) -> None:
        """Send the buffered frames in one write, after one poll of the socket for what the
        broker sent (a ``connection.blocked`` notice, confirms)."""
        data = self._frames.take()
        if not data:
            return
        with contextlib.suppress(TimeoutError):  # nothing came
            self._connection.drain_events(timeout=0)
        self._connection.transport.write(data)
