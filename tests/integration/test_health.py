"""The probes on real PostgreSQL and Redis: /livez, /readyz and /healthz, their answers before
host validation, who sees their details, and the beat heartbeat they read."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth.models import Permission, User
from django.db import DatabaseError
from django.test import Client, override_settings
from django.utils import timezone

from jobs.audit import Actor
from jobs.beat import heartbeat
from jobs.broker import broker_identity
from jobs.conf import get_ops_conf
from jobs.models import BeatHeartbeat, Job, Node, NodeState
from jobs.web import health, tokens

pytestmark = pytest.mark.django_db


def _node(name: str, age: timedelta = timedelta(0), state: NodeState = NodeState.ALIVE) -> Node:
    now = timezone.now()
    return Node.objects.create(
        name=name, host="h", pid=1, started_at=now, last_heartbeat=now - age, state=state
    )


def _beat() -> heartbeat.BeatHeartbeatRecorder:
    recorder = heartbeat.BeatHeartbeatRecorder(interval=5.0)
    recorder.tick(0.01)  # the first tick writes at once
    return recorder


def test_livez_needs_nothing(client: Client) -> None:
    response = client.get("/livez")

    assert response.status_code == 200
    assert response.json() == {"status": "ok"}


def test_readyz_checks_database_and_broker(insider: Client) -> None:
    response = insider.get("/readyz")

    assert response.status_code == 200, response.json()
    checks = response.json()["checks"]
    assert checks["database"]["ok"] and checks["broker"]["ok"]
    assert checks["broker"]["transport"] == "redis"


def test_healthz_is_503_without_a_beat_or_node(insider: Client) -> None:
    response = insider.get("/healthz")

    assert response.status_code == 503
    body = response.json()
    assert body["status"] == "failing"
    assert body["checks"]["database"]["ok"] and body["checks"]["broker"]["ok"]
    assert body["checks"]["beats"] == {**body["checks"]["beats"], "ok": False, "live": 0}
    assert body["checks"]["nodes"]["ok"] is False


def test_healthz_is_200_with_a_live_beat_and_node(insider: Client) -> None:
    recorder = _beat()
    _node("w1@h")
    _node("w2@h", age=timedelta(minutes=10))  # stale: not counted
    _node("w3@h", state=NodeState.STOPPED)

    response = insider.get("/healthz")

    assert response.status_code == 200, response.json()
    checks = response.json()["checks"]
    assert [beat["name"] for beat in checks["beats"]["beats"]] == [recorder.name]
    assert [node["name"] for node in checks["nodes"]["nodes"]] == ["w1@h"]
    assert checks["nodes"]["live"] == 1


def test_healthz_names_the_queues_no_live_worker_consumes(insider: Client) -> None:
    """A Django task's ``default`` queue with workers started without ``-Q`` (they consume
    ``celery`` only): its runs would wait for ever. Named, without failing the probe."""
    _beat()
    node = _node("w1@h")
    Node.objects.filter(pk=node.pk).update(queues=["celery", "reports"])
    _node("w2@h", age=timedelta(minutes=10))  # a dead worker's queues count for nothing
    Node.objects.filter(name="w2@h").update(queues=["default"])
    for name, queue in (("a", "default"), ("b", "default"), ("c", "reports"), ("d", "spare")):
        Job.objects.create(name=name, task="tests.record", queue=queue)
    Job.objects.filter(name="d").update(enabled=False)  # paused: nothing waits

    response = insider.get("/healthz")

    assert response.status_code == 200, response.json()
    queues = response.json()["checks"]["queues"]
    assert queues["ok"] and queues["unconsumed"] == 1
    assert queues["queues"] == [{"queue": "default", "jobs": 2}]
    Node.objects.filter(pk=node.pk).update(queues="not a list")  # written around the worker
    assert insider.get("/healthz").json()["checks"]["queues"]["queues"] == []


def test_a_beat_that_stopped_heartbeating_goes_stale(insider: Client) -> None:
    recorder = _beat()
    _node("w1@h")
    BeatHeartbeat.objects.filter(name=recorder.name).update(
        last_seen=timezone.now() - timedelta(minutes=5)
    )

    response = insider.get("/healthz")

    assert response.status_code == 503
    assert response.json()["checks"]["beats"]["live"] == 0


def test_probes_answer_whatever_the_host_header(client: Client) -> None:
    with override_settings(ALLOWED_HOSTS=["jobs.example.com"]):
        assert client.get("/livez", HTTP_HOST="10.1.2.3:8000").status_code == 200
        assert client.get("/readyz", HTTP_HOST="10.1.2.3:8000").status_code == 200
        assert client.get("/api/jobs", HTTP_HOST="10.1.2.3:8000").status_code == 400


def test_probes_refuse_writes(client: Client) -> None:
    response = client.post("/healthz")

    assert response.status_code == 405
    assert response["Allow"] == "GET, HEAD"


def test_an_unreachable_broker_fails_readiness_without_leaking_its_url(
    insider: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Celery reads the variable on every connection, ahead of its settings.
    monkeypatch.setenv("CELERY_BROKER_URL", "redis://:secret-password@127.0.0.1:1/0")

    response = insider.get("/readyz")

    assert response.status_code == 503
    broker = response.json()["checks"]["broker"]
    assert broker["ok"] is False and "error" in broker
    assert "secret-password" not in response.content.decode()


def test_a_database_failure_is_reported_not_raised(
    insider: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken() -> dict[str, Any]:
        raise DatabaseError("connection refused")

    monkeypatch.setattr(health, "check_database", broken)
    response = insider.get("/healthz")

    assert response.status_code == 503
    checks = response.json()["checks"]
    assert checks["database"] == {**checks["database"], "ok": False}
    assert "connection refused" in checks["database"]["error"]
    assert checks["beats"]["error"] == "the database is unreachable"


# --- who sees the details --------------------------------------------------------------------


def _healthy_cluster() -> None:
    _beat()
    _node("w1@h")


@pytest.mark.parametrize("path", ["/healthz", "/readyz"])
def test_anyone_gets_the_status_only(client: Client, path: str) -> None:
    _healthy_cluster()

    response = client.get(path)

    assert response.status_code == 200
    assert response.json() == {"status": "ok"}
    assert response["Cache-Control"] == "no-store"


def test_a_failing_cluster_tells_anyone_only_that_it_fails(client: Client) -> None:
    _node("w1@h")  # no beat

    response = client.get("/healthz")

    assert response.status_code == 503
    assert response.json() == {"status": "failing"}
    assert b"w1@h" not in response.content


def _sees_details(client: Client, **extra: Any) -> bool:
    body = client.get("/healthz", **extra).json()
    assert body["status"] == "ok"
    return "checks" in body


def test_api_tokens_see_the_details_read_only_ones_too(client: Client) -> None:
    _healthy_cluster()
    full = tokens.create("ops", actor=Actor.code("tests"))[1]
    read_only = tokens.create("scraper", read_only=True, actor=Actor.code("tests"))[1]

    assert _sees_details(client, headers={"authorization": f"Bearer {full}"})
    assert _sees_details(client, headers={"authorization": f"Bearer {read_only}"})
    # An unknown token is not refused (a probe always answers), it only sees the status.
    assert not _sees_details(client, headers={"authorization": "Bearer cj_unknown"})


def test_an_allowed_address_sees_the_details(client: Client) -> None:
    _healthy_cluster()
    with override_settings(JOBS_METRICS_ALLOW_FROM=["10.0.0.0/8"]):
        get_ops_conf.cache_clear()
        try:
            inside = _sees_details(client, REMOTE_ADDR="10.1.2.3")
            outside = _sees_details(client, REMOTE_ADDR="192.0.2.7")
        finally:
            get_ops_conf.cache_clear()
    assert inside and not outside


def _session(*permissions: str, superuser: bool = False) -> Client:
    user = User.objects.create_user("ops", password="x", is_staff=True, is_superuser=superuser)
    user.user_permissions.add(*Permission.objects.filter(codename__in=permissions))
    browser = Client()
    browser.force_login(user)
    return browser


def test_a_staff_session_needs_the_job_view_permission() -> None:
    _healthy_cluster()

    assert not _sees_details(_session("view_node"))
    User.objects.all().delete()
    assert _sees_details(_session("view_job"))
    User.objects.all().delete()
    assert _sees_details(_session(superuser=True))


def test_a_session_cookie_holding_a_nul_is_no_session(client: Client) -> None:
    _healthy_cluster()
    cookie = {"cookie": 'sessionid="\\000abcdefghij"'}  # an octal escape: a NUL once parsed

    assert client.get("/healthz", headers=cookie).json() == {"status": "ok"}
    assert client.get("/metrics", headers=cookie).status_code == 401


def test_the_status_is_answered_when_credentials_cannot_be_checked(
    client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    _healthy_cluster()

    def unreachable(secret: str) -> None:
        raise DatabaseError("connection refused")

    monkeypatch.setattr(tokens, "authenticate", unreachable)
    response = client.get("/healthz", headers={"authorization": "Bearer cj_x"})

    assert response.status_code == 200
    assert response.json() == {"status": "ok"}


def test_healthz_names_beats_and_workers_on_different_brokers(insider: Client) -> None:
    recorder = _beat()  # records this process's broker, as its beat would
    assert BeatHeartbeat.objects.get(name=recorder.name).broker == broker_identity.current()
    _node("w1@h")  # registered before brokers were recorded: not judged
    Node.objects.filter(name="w1@h").update(broker=broker_identity.current())

    response = insider.get("/healthz")
    assert response.status_code == 200, response.json()
    assert response.json()["checks"]["configuration"] == {
        **response.json()["checks"]["configuration"],
        "ok": True,
        "problems": [],
    }

    other = _node("w2@h")
    Node.objects.filter(pk=other.pk).update(broker="redis://elsewhere:6379/0")
    response = insider.get("/healthz")
    assert response.status_code == 503
    (problem,) = response.json()["checks"]["configuration"]["problems"]
    assert problem["cause"] == "brokers_differ"
    assert "CELERY_BROKER_URL" in problem["message"]
    assert problem["brokers"]["redis://elsewhere:6379/0"] == ["node w2@h"]


def test_a_broker_url_is_recorded_without_its_credentials() -> None:
    assert (
        broker_identity.redacted("amqp://user:secret@rabbit:5672/prod?heartbeat=10")
        == "amqp://rabbit:5672/prod"
    )
    assert (
        broker_identity.redacted("redis://:pw@r1:6379/0;redis://r2:6379/0") == "redis://r1:6379/0"
    )
