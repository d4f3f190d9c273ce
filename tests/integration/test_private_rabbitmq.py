"""The private RabbitMQ node ``make test`` starts when none answers on 5672 (devtools/rabbitmq.py):
it carries messages, its ``rabbitmqctl`` script administers it (and not the machine's RabbitMQ),
and once stopped nothing of it is left listening. It always runs on ports of its own, so this
test never touches a RabbitMQ the machine runs on 5672."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from kombu import Connection

from devtools import rabbitmq
from devtools.rabbitmq import LOOPBACK, PrivateNode, amqp_answers, private_rabbitmq_node


def _listening(port: int) -> bool:
    with socket.socket() as probe:
        probe.settimeout(1)
        return probe.connect_ex((LOOPBACK, port)) == 0


def test_private_node_carries_messages_answers_rabbitmqctl_and_stops() -> None:
    machine_rabbitmq = amqp_answers(LOOPBACK, 5672)
    queue = f"private-node-{uuid.uuid4().hex[:8]}"

    with private_rabbitmq_node() as node:
        assert node.amqp_port != 5672
        assert node.amqp_url.startswith("amqp://jobs-test:") and f"@{LOOPBACK}:" in node.amqp_url
        assert amqp_answers(LOOPBACK, node.amqp_port)
        with Connection(node.amqp_url, connect_timeout=10) as conn:
            simple = conn.SimpleQueue(queue)
            simple.put({"hello": "private node"})

            # The queue is on the private node: its rabbitmqctl sees it, with the one message.
            listed = subprocess.run(
                [str(node.rabbitmqctl), "-q", "list_queues", "name", "messages"],
                capture_output=True, text=True, timeout=60, check=True,
            ).stdout  # fmt: skip
            assert f"{queue}\t1" in listed.splitlines(), listed

            message = simple.get(timeout=10)
            assert message.payload == {"hello": "private node"}
            message.ack()
            simple.close()
        folder = node.rabbitmqctl.parent

    assert not _listening(node.amqp_port), "the private node still listens after its stop"
    assert not amqp_answers(LOOPBACK, node.amqp_port)
    assert not folder.exists(), "the private node's folder was left behind"
    assert amqp_answers(LOOPBACK, 5672) == machine_rabbitmq, "the machine's RabbitMQ changed"


@pytest.mark.parametrize(
    ("environ", "local_answers", "starts"),
    [
        ({}, True, False),  # the machine's RabbitMQ on 5672
        ({}, False, True),  # nothing on 5672: a private node
        ({"JOBS_TEST_AMQP_URL": "amqp://u:p@127.0.0.1:5999/"}, False, False),  # told where
        ({"JOBS_TEST_PRIVATE_RABBITMQ": "1"}, True, True),  # asked for one
    ],
)
def test_a_private_node_only_when_no_rabbitmq_is_at_hand(
    monkeypatch: pytest.MonkeyPatch, environ: dict[str, str], local_answers: bool, starts: bool
) -> None:
    node = PrivateNode("n@localhost", 5999, "amqp://u:p@127.0.0.1:5999/", Path("/x/rabbitmqctl"))

    @contextlib.contextmanager
    def fake_node() -> Iterator[PrivateNode]:
        yield node

    monkeypatch.setattr(rabbitmq, "amqp_answers", lambda host, port: local_answers)
    monkeypatch.setattr(rabbitmq, "private_rabbitmq_node", fake_node)
    with rabbitmq.rabbitmq_for_tests(environ) as env:
        assert env == (node.as_env() if starts else {})
