"""Issue 14 acceptance: alerts told once, on real ``celery beat`` / ``celery worker`` processes
and a local webhook receiver (an HTTP server in a thread of this test, on a free port).

Two beats and two workers each run an alert sender; the ``alerts`` lease lets one at a time
send, and the database lets one incident per job and kind be open, so a job failing every second
is one "opened" notification, and its first success one "resolved", whatever the number of
processes; a receiver that answers 500 at first gets each notification once it answers 200
(the same idempotency key on every try).
"""

from __future__ import annotations

import os
import signal
from collections import Counter
from datetime import timedelta
from email import message_from_bytes
from email.message import EmailMessage
from email.policy import default as default_policy
from pathlib import Path
from typing import Any

import pytest
from aiosmtpd.controller import Controller
from django.db.models.functions import Now
from django.utils import timezone

from devtools.services import free_port
from jobs.audit import Actor
from jobs.models import AlertDelivery, BeatHeartbeat, Incident, Job, JobRun, RunStatus
from jobs.schedule.kinds import Every
from jobs.services import JobDefinition, create_job, run_now
from tests.acceptance.conftest import Cluster, wait_for
from tests.support.continuous_cluster import (
    TAKEOVER_BOUND,
    add_continuous_jobs,
    live_holders,
    node_named,
    use_continuous_jobs,
)
from tests.support.job_factory import new_job
from tests.support.webhook_receiver import Receiver

pytestmark = pytest.mark.acceptance

SECRET = "acceptance-secret-" + "x" * 32
START_TIMEOUT = 90
FAILING_FOR = 15  # seconds of a job failing every second


def _alerting(cluster: Cluster, receiver: Receiver) -> None:
    cluster.env.update(
        JOBS_ALERT_WEBHOOK_URL=receiver.url,
        JOBS_ALERT_WEBHOOK_SECRET=SECRET,
        # The receiver listens on 127.0.0.1, a loopback target.
        JOBS_ALERT_ALLOW_PRIVATE_TARGETS="1",
        JOBS_MAINTENANCE_INTERVAL="0.5",
    )


def _start(cluster: Cluster, beats: int = 2, workers: int = 2) -> None:
    for i in range(beats):
        cluster.start_beat(f"beat{i}")
    for i in range(workers):
        cluster.start_worker(f"w{i}")

    def started() -> bool:
        return all("beat loaded" in cluster.log_of(f"beat{i}") for i in range(beats)) and all(
            " ready." in cluster.log_of(f"w{i}") for i in range(workers)
        )

    wait_for(started, timeout=START_TIMEOUT, what="beats loaded and workers ready", poll=0.5)


def _of_job(receiver: Receiver, name: str) -> list[tuple[str, str]]:
    """(event, idempotency key) of each notification about job ``name`` the receiver took."""
    return [
        (r.payload["event"], r.headers["Idempotency-Key"])
        for r in receiver.accepted()
        if (r.payload.get("job") or {}).get("name") == name
    ]


def _holding(cluster: Cluster, name: str, hold: Path, log: Path, **policies: Any) -> None:
    """A job ``name`` of ``tests.hold`` (running while ``hold`` exists), alerting by webhook."""
    new_job(
        name, "tests.hold", Every(3600), kwargs={"hold": str(hold)}, log=log,
        queue=cluster.queue, alert_channels="webhook", **policies,
    )  # fmt: skip


def _running(name: str, kwargs: dict[str, Any] | None = None) -> tuple[JobRun, int]:
    """Job ``name`` run now (with ``kwargs``): the run, once running, and its pool process's
    pid."""
    run = run_now(name, actor=Actor.code("tests"), kwargs=kwargs)
    running = JobRun.objects.filter(pk=run.pk, status=RunStatus.RUNNING)
    wait_for(running.exists, timeout=20, what="the run running")
    pid = JobRun.objects.get(pk=run.pk).pid
    assert pid is not None
    return run, pid


def _wait_told(receiver: Receiver, name: str, event: str, what: str) -> None:
    """Until the receiver took an ``event`` notification about job ``name``."""
    wait_for(lambda: event in {told for told, _ in _of_job(receiver, name)}, timeout=30, what=what)


def _stop_once_the_outbox_is_empty(cluster: Cluster) -> None:
    # Every process had time to (wrongly) send anything twice: senders look every second.
    wait_for(
        lambda: not AlertDelivery.objects.filter(state="pending").exists(),
        timeout=10,
        what="an empty outbox",
    )
    cluster.stop_all()


@pytest.mark.parametrize("fail_first", [0, 3], ids=["receiver-up", "receiver-500-at-first"])
def test_a_failing_job_is_told_once_opened_and_once_resolved(
    cluster: Cluster, tmp_path: Path, fail_first: int
) -> None:
    healed = tmp_path / "healed"
    with Receiver(fail_first=fail_first) as receiver:
        _alerting(cluster, receiver)
        _start(cluster)  # then the job: no slot of it passed before a beat was up (no catch-up)
        create_job(
            JobDefinition(
                name="nightly",
                task="tests.fail_until",
                schedule=Every(1),
                kwargs={"healed": str(healed)},
                policies={"queue": cluster.queue, "alert_channels": "webhook"},
            ),
            actor=Actor.code("tests"),
        )
        failed = JobRun.objects.filter(job__name="nightly", status=RunStatus.FAILED)
        wait_for(lambda: failed.exists(), timeout=30, what="a first failed run")
        first_failure = timezone.now()
        wait_for(
            lambda: (timezone.now() - first_failure).total_seconds() >= FAILING_FOR,
            timeout=FAILING_FOR + 5,
            what=f"{FAILING_FOR} s of failures",
            poll=0.5,
        )
        healed.touch()
        _wait_told(receiver, "nightly", "resolved", what="the resolved notification")
        _stop_once_the_outbox_is_empty(cluster)
    told = _of_job(receiver, "nightly")
    assert Counter(event for event, _ in told) == {"opened": 1, "resolved": 1}
    assert failed.count() >= FAILING_FOR - 2
    incident = Incident.objects.get(job__name="nightly")
    bad = JobRun.objects.filter(job__name="nightly", status__in=["failed", "missed", "lost"])
    assert incident.bad_runs == bad.count(), Counter(bad.values_list("status", flat=True))
    assert incident.resolved_at is not None
    assert all(r.signature_verifies(SECRET) for r in receiver.received)
    # Every try of a notification carries its key: the 500s were tries of the same two.
    keys = Counter(r.headers["Idempotency-Key"] for r in receiver.received)
    assert set(keys) == {key for _, key in told} and sum(keys.values()) == 2 + fail_first
    opened = next(r.payload for r in receiver.accepted() if r.payload["event"] == "opened")
    assert opened["incident"]["reason"] == "failed"
    assert "nightly" in opened["text"] and opened["runs"]["first"]["status"] == "failed"
    row = AlertDelivery.objects.get(incident=incident, event="opened")
    assert (row.state, row.attempts) == ("delivered", 1 + fail_first)


def test_a_run_killed_mid_run_is_one_lost_alert(cluster: Cluster, tmp_path: Path) -> None:
    hold = tmp_path / "hold"
    hold.touch()
    with Receiver() as receiver:
        _alerting(cluster, receiver)
        _holding(cluster, "long", hold, tmp_path / "log", lease_ttl=3)
        _start(cluster)
        run, pid = _running("long")
        os.kill(pid, signal.SIGKILL)  # the pool process running it, mid-run
        _wait_told(receiver, "long", "opened", what="the lost alert")
        _stop_once_the_outbox_is_empty(cluster)
    assert JobRun.objects.get(pk=run.pk).status == RunStatus.LOST
    told = _of_job(receiver, "long")
    assert [event for event, _ in told] == ["opened"]
    (opened,) = [r.payload for r in receiver.accepted() if r.payload.get("job")]
    assert opened["incident"]["reason"] == "lost" and opened["runs"]["last"]["id"] == run.pk
    assert Job.objects.get(name="long").incidents.get().resolved_at is None


def test_a_continuous_jobs_lost_incident_resolves_once_it_runs_on_a_live_node(
    cluster: Cluster, tmp_path: Path
) -> None:
    with Receiver() as receiver:
        _alerting(cluster, receiver)
        log = use_continuous_jobs(cluster, tmp_path)
        (key,) = add_continuous_jobs(cluster, log, ["poller"])
        _start(cluster, beats=1, workers=2)
        wait_for(lambda: key in live_holders(), timeout=START_TIMEOUT, what="the poller running")
        holder = live_holders()[key][0]
        victim = next(name for name in ("w0", "w1") if node_named(name) == holder)
        cluster.kill(victim, signal.SIGKILL)
        wait_for(
            lambda: live_holders().get(key, (holder,))[0] != holder,
            timeout=TAKEOVER_BOUND + 30,
            what="the poller on the other node",
        )
        _wait_told(receiver, "poller", "resolved", what="the lost incident's resolution")
        _stop_once_the_outbox_is_empty(cluster)
    # One incident: the dead node's tenure lost, resolved by the tenure that took over; told
    # once each way.
    incident = Job.objects.get(name="poller").incidents.get()
    assert (incident.kind, incident.reason) == ("failing", "lost")
    assert incident.last_run_id is not None and incident.resolved_by_run_id is not None
    assert JobRun.objects.get(pk=incident.last_run_id).node == holder
    moved = JobRun.objects.get(pk=incident.resolved_by_run_id)
    assert moved.node != holder and moved.trigger == "continuous"
    assert [event for event, _ in _of_job(receiver, "poller")] == ["opened", "resolved"]


def test_a_run_stopped_past_its_time_limit_is_one_running_long_alert(
    cluster: Cluster, tmp_path: Path
) -> None:
    hold = tmp_path / "hold"
    hold.touch()
    with Receiver() as receiver:
        _alerting(cluster, receiver)
        _holding(
            cluster,
            "wedged",
            hold,
            tmp_path / "log",
            soft_time_limit=2,
            lease_ttl=120,  # it stays running (not lost) while stopped
        )
        _start(cluster)
        run, pid = _running("wedged")
        os.kill(pid, signal.SIGSTOP)
        try:
            _wait_told(receiver, "wedged", "opened", what="the running-long alert")
            stuck = Incident.objects.get(job__name="wedged")
            assert (stuck.kind, stuck.last_run_id) == ("running_long", run.pk)
            assert JobRun.objects.get(pk=run.pk).status == RunStatus.RUNNING
        finally:
            os.kill(pid, signal.SIGCONT)
        hold.unlink()  # it returns, past its soft limit: recorded failed, no longer running
        wait_for(
            lambda: Incident.objects.filter(pk=stuck.pk, resolved_at__isnull=False).exists(),
            timeout=20,
            what="the running-long incident resolved by the run's end",
        )
        _stop_once_the_outbox_is_empty(cluster)
    told = [
        r.payload for r in receiver.accepted() if r.payload["incident"]["kind"] == "running_long"
    ]
    stuck_told = [payload["event"] for payload in told]
    # Should it fail: which incident and run each notification was about (the same incident
    # told twice, or a second one), and the run's status then.
    # (A text, not a list: pytest shortens the repr of anything else.)
    seen = "; ".join(
        f"{p['event']} of incident {p['incident']['id']} opened {p['incident']['opened_at']}, "
        f"last run {p['runs']['last']['id']} {p['runs']['last'].get('status')}"
        for p in told
    )
    # And what the senders logged of each attempt (a failed one is sent again).
    attempts = [
        f"{name}: {line}"
        for name in ("beat0", "beat1", "w0", "w1")
        for line in cluster.log_of(name).splitlines()
        if "alert " in line and " of incident " in line
    ]
    assert stuck_told == ["opened", "resolved"], seen + "\n" + "\n".join(attempts)


def test_stopping_every_beat_is_one_cluster_alert(cluster: Cluster, tmp_path: Path) -> None:
    with Receiver() as receiver:
        _alerting(cluster, receiver)
        cluster.env.update(JOBS_BEAT_HEARTBEAT_INTERVAL="0.5", JOBS_BEAT_STALE_AFTER="3")
        _start(cluster)
        live = BeatHeartbeat.objects.filter(last_seen__gt=Now() - timedelta(seconds=3))
        wait_for(lambda: live.count() == 2, timeout=20, what="two live beats")
        cluster.kill("beat0", signal.SIGKILL)
        cluster.kill("beat1", signal.SIGTERM)

        def no_beat(event: str) -> list[dict[str, object]]:
            return [
                r.payload
                for r in receiver.accepted()
                if r.payload["incident"]["kind"] == "no_beat" and r.payload["event"] == event
            ]

        wait_for(lambda: bool(no_beat("opened")), timeout=30, what="the no-live-beat alert")
        cluster.start_beat("beat2")
        wait_for(lambda: bool(no_beat("resolved")), timeout=40, what="its resolution")
        _stop_once_the_outbox_is_empty(cluster)
    (opened,) = no_beat("opened")
    assert opened["job"] is None and "no live beat" in str(opened["text"])
    assert len(no_beat("resolved")) == 1
    assert Incident.objects.filter(kind="no_beat").count() == 1


class Mailbox:
    """An aiosmtpd handler keeping every message received."""

    def __init__(self) -> None:
        self.messages: list[EmailMessage] = []

    async def handle_DATA(self, server: object, session: object, envelope: Any) -> str:
        message = message_from_bytes(envelope.content, policy=default_policy)
        assert isinstance(message, EmailMessage)
        self.messages.append(message)
        return "250 OK"


def test_alerts_are_e_mailed_through_smtp(cluster: Cluster, tmp_path: Path) -> None:
    mailbox = Mailbox()
    smtp = Controller(mailbox, hostname="127.0.0.1", port=free_port())
    smtp.start()
    try:
        cluster.env.update(
            JOBS_ALERT_EMAILS="ops@example.com,oncall@example.com",
            EMAIL_HOST="127.0.0.1",
            EMAIL_PORT=str(smtp.port),
            DEFAULT_FROM_EMAIL="jobs@example.com",
            JOBS_PUBLIC_URL="https://jobs.example.com",
        )
        create_job(
            JobDefinition(
                name="mailed",
                task="tests.fail",
                schedule=Every(3600),
                policies={"queue": cluster.queue, "alert_channels": "email"},
            ),
            actor=Actor.code("tests"),
        )
        _start(cluster, beats=1, workers=1)
        run = run_now("mailed", actor=Actor.code("tests"))
        wait_for(lambda: bool(mailbox.messages), timeout=30, what="the alert e-mail")
        _stop_once_the_outbox_is_empty(cluster)
    finally:
        smtp.stop()
    (message,) = mailbox.messages
    incident = Incident.objects.get(job__name="mailed")
    assert message["To"] == "ops@example.com, oncall@example.com"
    assert message["From"] == "jobs@example.com"
    assert message["Idempotency-Key"] == f"incident-{incident.pk}-opened"
    assert "mailed" in message["Subject"] and "FAILED" in message["Subject"]
    body = message.get_content()
    assert "boom from tests.fail" in body
    assert f"https://jobs.example.com/admin/jobs/jobrun/{run.pk}/change/" in body
    assert AlertDelivery.objects.get(incident=incident).state == "delivered"


# Duration baselines (jobs.alerts.baseline): a job whose runs take about a second.
BASELINE_RUNS = 10  # baseline.SHORT_MIN_SAMPLES: enough for both rules
USUAL, LONG, SHORT = 1.0, 10.0, 0.01  # seconds


def _run_to_the_end(name: str, seconds: float) -> JobRun:
    run = run_now(name, actor=Actor.code("tests"), kwargs={"seconds": seconds})
    ended = JobRun.objects.filter(pk=run.pk, status=RunStatus.SUCCEEDED)
    wait_for(ended.exists, timeout=30 + seconds, what=f"a {seconds:g} s run succeeded")
    return JobRun.objects.get(pk=run.pk)


def _duration(run: JobRun) -> float:
    assert run.started_at is not None and run.finished_at is not None
    return (run.finished_at - run.started_at).total_seconds()


def test_a_job_of_one_second_is_told_running_long_while_it_runs_and_too_short_once(
    cluster: Cluster, tmp_path: Path
) -> None:
    with Receiver() as receiver:
        _alerting(cluster, receiver)
        new_job(
            "breathing", "tests.record", Every(3600), kwargs={"seconds": USUAL},
            log=tmp_path / "log", queue=cluster.queue, alert_channels="webhook",
        )  # fmt: skip
        _start(cluster, beats=2, workers=1)
        seeded = [_run_to_the_end("breathing", USUAL) for _ in range(BASELINE_RUNS)]
        assert not Incident.objects.exists(), [_duration(run) for run in seeded]

        # Ten times its usual second: running long while it runs (at 5 s, the floor), not at
        # its end; resolved by its end.
        long, _ = _running("breathing", kwargs={"seconds": LONG})
        opened = Incident.objects.filter(job__name="breathing", kind="running_long")
        wait_for(opened.exists, timeout=LONG, what="the running-long incident")
        running_long = opened.get()
        assert running_long.last_run_id == long.pk
        assert JobRun.objects.get(pk=long.pk).status == RunStatus.RUNNING, "found at its end"
        assert "3 x its baseline" in running_long.summary
        wait_for(
            lambda: Incident.objects.filter(
                pk=running_long.pk, resolved_by_run_id=long.pk
            ).exists(),
            timeout=LONG + 20,
            what="the running-long incident resolved by the run's end",
        )

        # Ten milliseconds: a success far under its baseline, one too-short incident however
        # many maintenance passes see it; the next usual run resolves it.
        short = _run_to_the_end("breathing", SHORT)
        too_short = Incident.objects.filter(job__name="breathing", kind="too_short")
        wait_for(too_short.exists, timeout=10, what="the too-short incident")
        assert too_short.get().last_run_id == short.pk, _duration(short)
        _wait_told(receiver, "breathing", "opened", what="the too-short alert")
        fine = _run_to_the_end("breathing", USUAL)
        wait_for(
            lambda: too_short.filter(resolved_by_run_id=fine.pk).exists(),
            timeout=10,
            what="the too-short incident resolved by a usual run",
        )
        _stop_once_the_outbox_is_empty(cluster)

    incidents = Incident.objects.filter(job__name="breathing").order_by("id")
    assert [(i.kind, i.last_run_id, i.bad_runs) for i in incidents] == [
        ("running_long", long.pk, 1),
        ("too_short", short.pk, 1),
    ]
    told = [
        (r.payload["incident"]["kind"], r.payload["event"])
        for r in receiver.accepted()
        if (r.payload.get("job") or {}).get("name") == "breathing"
    ]
    assert Counter(told) == {
        ("running_long", "opened"): 1,
        ("running_long", "resolved"): 1,
        ("too_short", "opened"): 1,
        ("too_short", "resolved"): 1,
    }
