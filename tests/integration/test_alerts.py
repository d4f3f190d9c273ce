"""Incidents and their outbox (issue 14), against real PostgreSQL: opened and resolved by the
database in the transaction of the run's outcome, delivered by the sender once per event."""

from __future__ import annotations

import io
import json
import re
import threading
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command
from django.db import connection
from django.test import Client
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

import tests.support.jobs_continuous  # noqa: F401  (registers the continuous functions)
from jobs.alerts import sender
from jobs.alerts.detect import open_incident, resolve_incidents
from jobs.continuous import tenures
from jobs.guard import lease
from jobs.guard.runner import execute_run
from jobs.models import AlertDelivery, AuditEntry, Incident, Job, JobRun, RunStatus, Trigger
from jobs.upkeep.recovery import recover_lost_runs
from jobs.values import timestamps
from tests.support.job_factory import new_job, run_here

pytestmark = pytest.mark.django_db(transaction=True)


def _events(job: Job) -> list[tuple[str, str]]:
    return sorted(AlertDelivery.objects.filter(incident__job=job).values_list("event", "channel"))


def test_consecutive_failures_are_one_incident_and_a_success_resolves_it(
    make_job: Callable[..., Job], healing: Path
) -> None:
    job = make_job("flaky", task="tests.fail_until", kwargs={"healed": str(healing)})
    for _ in range(3):
        run_here(job)
    incident = Incident.objects.get(job=job)
    assert (incident.kind, incident.reason, incident.bad_runs) == ("failing", "failed", 3)
    assert incident.resolved_at is None and "failing until" in incident.summary
    assert _events(job) == [("opened", "email"), ("opened", "webhook")]

    healing.touch()
    run_here(job)
    incident.refresh_from_db()
    assert incident.resolved_at is not None
    assert incident.resolved_by_run_id == JobRun.objects.get(job=job, status="succeeded").pk
    assert _events(job) == [
        ("opened", "email"),
        ("opened", "webhook"),
        ("resolved", "email"),
        ("resolved", "webhook"),
    ]
    run_here(job)  # healthy runs add nothing
    assert Incident.objects.filter(job=job).count() == 1 and len(_events(job)) == 4


def test_a_failure_with_a_retry_due_is_no_incident_until_the_retry_fails(
    make_job: Callable[..., Job], published: list[object]
) -> None:
    job = make_job("retried", task="tests.fail", max_retries=1, retry_backoff=1)
    run_here(job)
    assert not Incident.objects.filter(job=job).exists()
    retry = JobRun.objects.get(job=job, trigger=Trigger.RETRY)
    JobRun.objects.filter(pk=retry.pk).update(scheduled_for=timezone.now())
    execute_run(retry.pk, task_id="t", node="n1")
    incident = Incident.objects.get(job=job)
    assert (incident.first_run_id, incident.bad_runs) == (retry.pk, 1)


def test_a_lost_run_opens_a_lost_incident(make_job: Callable[..., Job]) -> None:
    job = make_job("dies")
    run = JobRun.objects.create(job=job, scheduled_for=timezone.now(), trigger=Trigger.MANUAL)
    held = lease.acquire(job.lock_key, "dead-worker", 30)
    assert held is not None
    JobRun.objects.filter(pk=run.pk).update(
        status=RunStatus.RUNNING, started_at=timezone.now(), fencing_token=held.token,
        lease_key=job.lock_key,
    )  # fmt: skip
    lease.release(held)  # as its lapse would
    assert recover_lost_runs() == [run.pk]
    incident = Incident.objects.get(job=job)
    assert (incident.reason, incident.last_run_id) == ("lost", run.pk)


def test_missed_slots_recorded_together_join_one_incident(make_job: Callable[..., Job]) -> None:
    job = make_job("behind")
    now = timezone.now()
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO jobs_jobrun (job_id, scheduled_for, status, error) "
            "SELECT %s, %s - make_interval(secs => s), 'missed', 'no beat' "
            "FROM generate_series(1, 5) AS s",
            [job.pk, now],
        )
    incident = Incident.objects.get(job=job)
    assert (incident.reason, incident.bad_runs) == ("missed", 5)


def test_a_muted_job_opens_its_incident_without_notifying_and_resolves_quietly(
    make_job: Callable[..., Job],
) -> None:
    job = make_job("quiet", task="tests.fail")
    Job.objects.filter(pk=job.pk).update(alerts_muted_until=timezone.now() + timedelta(hours=1))
    run_here(job)
    assert Incident.objects.get(job=job).resolved_at is None
    assert _events(job) == []
    # The mute ends while the incident is open: the next bad run notifies its opening.
    Job.objects.filter(pk=job.pk).update(alerts_muted_until=timezone.now() - timedelta(seconds=1))
    run_here(job)
    assert _events(job) == [("opened", "email"), ("opened", "webhook")]


def test_a_job_chooses_its_channels_and_reasons(make_job: Callable[..., Job]) -> None:
    webhook_only = make_job("hooked", task="tests.fail", alert_channels="webhook")
    never = make_job("never", task="tests.fail", alert_channels="none")
    lost_only = make_job("lost-only", task="tests.fail", alert_reasons=["lost"])
    for job in (webhook_only, never, lost_only):
        run_here(job)
    assert _events(webhook_only) == [("opened", "webhook")]
    assert _events(never) == [] and _events(lost_only) == []
    assert Incident.objects.filter(resolved_at__isnull=True).count() == 3


def test_cluster_incidents_are_one_open_at_a_time(db: None) -> None:
    first = open_incident(None, "no_beat", "no_beat", "no beat")
    assert first is not None
    assert open_incident(None, "no_beat", "no_beat", "no beat") is None
    assert Incident.objects.filter(job=None, resolved_at=None).count() == 1
    assert resolve_incidents(None, ["no_beat"]) == [first]
    assert open_incident(None, "no_beat", "no_beat", "again") not in (None, first)
    assert sorted(
        AlertDelivery.objects.filter(incident_id=first).values_list("event", flat=True)
    ) == ["opened", "opened", "resolved", "resolved"]


def test_concurrent_failures_of_one_job_open_one_incident(make_job: Callable[..., Job]) -> None:
    job = make_job("flaky", task="tests.fail", overlap="allow")
    runs = [
        JobRun.objects.create(job=job, scheduled_for=timezone.now(), trigger=Trigger.MANUAL)
        for _ in range(6)
    ]
    barrier = threading.Barrier(len(runs))

    def execute(run_id: int) -> None:
        barrier.wait()
        try:
            execute_run(run_id, task_id="t", node="n1")
        finally:
            connection.close()

    threads = [threading.Thread(target=execute, args=(run.pk,)) for run in runs]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    incident = Incident.objects.get(job=job)
    assert incident.bad_runs == 6
    assert _events(job) == [("opened", "email"), ("opened", "webhook")]


def test_the_api_patches_a_jobs_alert_settings(
    make_job: Callable[..., Job], insider: Client
) -> None:
    make_job("nightly")
    answer = insider.patch(
        "/api/jobs/nightly",
        {"alert_channels": "email", "alert_reasons": ["failed", "lost"]},
        content_type="application/json",
    )
    assert answer.status_code == 200, answer.content
    assert (answer.json()["alert_channels"], answer.json()["alert_reasons"]) == (
        "email",
        ["failed", "lost"],
    )
    refused = insider.patch(
        "/api/jobs/nightly", {"alert_reasons": ["late"]}, content_type="application/json"
    )
    assert refused.status_code == 400 and "alert_reasons" in refused.json()["fields"]
    # The schema says each reason at most once (uniqueItems), and so does the answer.
    twice = insider.patch(
        "/api/jobs/nightly",
        {"alert_reasons": ["too_short", "too_short"]},
        content_type="application/json",
    )
    assert twice.status_code == 400 and "at most once" in twice.json()["fields"]["alert_reasons"][0]
    assert Job.objects.get(name="nightly").alert_reasons == ["failed", "lost"]


# --- operators: mute, the CLI, the admin, /metrics --------------------------------------------


def _jobs(*args: str) -> str:
    out = io.StringIO()
    call_command("jobs", *args, stdout=out, stderr=io.StringIO())
    return out.getvalue()


def test_the_cli_mutes_lists_incidents_and_sets_alert_flags(make_job: Callable[..., Job]) -> None:
    job = make_job("flaky", task="tests.fail")
    assert _jobs("mute", "flaky", "--for", "2h").startswith("muted flaky until ")
    muted = Job.objects.get(pk=job.pk).alerts_muted_until
    assert muted is not None
    assert timedelta(hours=2) - timedelta(seconds=5) < muted - timezone.now() <= timedelta(hours=2)
    entry = AuditEntry.objects.filter(job=job).order_by("-id").first()
    assert entry is not None and entry.after == {"alerts_muted_until": muted.isoformat()}
    run_here(job)
    assert _events(job) == []
    assert _jobs("unmute", "flaky") == "unmuted flaky\n"
    assert Job.objects.get(pk=job.pk).alerts_muted_until is None
    (record,) = json.loads(_jobs("incidents", "flaky", "--open", "--json"))
    assert (record["job"], record["kind"], record["reason"], record["bad_runs"]) == (
        "flaky", "failing", "failed", 1,
    )  # fmt: skip
    _jobs("add", "hooked", "--task", "tests.fail", "--every", "1h", "--alert-channels",
          "webhook", "--alert-reasons", "failed,lost")  # fmt: skip
    hooked = Job.objects.get(name="hooked")
    assert (hooked.alert_channels, hooked.alert_reasons) == ("webhook", ["failed", "lost"])
    with pytest.raises(CommandError, match="alert-reasons"):
        _jobs("add", "bad", "--task", "tests.fail", "--every", "1h", "--alert-reasons", "late")


def test_the_admin_mutes_and_shows_open_incidents(
    make_job: Callable[..., Job], admin_client: Client
) -> None:
    job = make_job("flaky", task="tests.fail")
    run_here(job)
    page = admin_client.get(f"/admin/jobs/job/{job.pk}/change/").content.decode()
    incident = Incident.objects.get(job=job)
    assert f"/admin/jobs/incident/{incident.pk}/change/" in page and "failing" in page
    # Its time with the zone, as every time on the pages; one bad run, not "1 bad runs".
    since = timestamps.display(incident.opened_at)
    assert since.endswith(" UTC")
    assert f"#{incident.pk} failing (failed, 1 bad run) since {since}</a>" in page
    run_here(job)
    page = admin_client.get(f"/admin/jobs/job/{job.pk}/change/").content.decode()
    assert f"#{incident.pk} failing (failed, 2 bad runs) since {since}</a>" in page
    for url in (f"/admin/jobs/incident/{incident.pk}/change/", "/admin/jobs/alertdelivery/"):
        assert f"failing of flaky since {since}" in admin_client.get(url).content.decode(), url
    answer = admin_client.post(
        "/admin/jobs/job/", {"action": "mute_2h", "_selected_action": [job.pk]}
    )
    assert answer.status_code == 302
    assert Job.objects.get(pk=job.pk).alerts_muted_until is not None
    assert admin_client.get(f"/admin/jobs/incident/{incident.pk}/change/").status_code == 200
    assert admin_client.get("/admin/jobs/alertdelivery/").status_code == 200


def test_metrics_export_open_incidents_and_deliveries_by_state(
    make_job: Callable[..., Job], alerts_to: Callable[..., None], insider: Client
) -> None:
    alerts_to()  # no channel: every delivery is dropped
    run_here(make_job("flaky", task="tests.fail"))
    run_here(make_job("other", task="tests.fail", alert_channels="webhook"))

    def samples() -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
        text = insider.get("/metrics").content.decode()
        return {
            (s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(text)
            for s in family.samples
        }

    before = samples()
    assert before[("jobs_incidents_open", frozenset({("kind", "failing")}))] == 2
    assert before[("jobs_incidents_open", frozenset({("kind", "running_long")}))] == 0
    flaky = frozenset({("job", "flaky"), ("kind", "failing"), ("reason", "failed")})
    assert before[("jobs_incident_open", flaky)] == 1
    pending = frozenset({("channel", "webhook"), ("state", "pending")})
    assert before[("jobs_alert_deliveries", pending)] == 2
    assert before[("jobs_alert_outbox_oldest_pending_seconds", frozenset())] > 0
    sender.drain("test-sender")
    after = samples()
    assert after[("jobs_alert_deliveries", pending)] == 0
    dropped = frozenset({("channel", "webhook"), ("state", "dropped")})
    assert after[("jobs_alert_deliveries", dropped)] == 2
    assert after[("jobs_alert_outbox_oldest_pending_seconds", frozenset())] == 0


def test_the_dashboard_shows_open_incidents(
    make_job: Callable[..., Job], admin_client: Client
) -> None:
    assert (
        "None: every job and the cluster are healthy."
        in admin_client.get("/admin/jobs/dashboard/").content.decode()
    )
    job = make_job("flaky", task="tests.fail")
    run_here(job)
    page = admin_client.get("/admin/jobs/dashboard/").content.decode()
    incident = Incident.objects.get(job=job)
    assert f"/admin/jobs/incident/{incident.pk}/change/" in page and "boom from tests.fail" in page


def test_the_cli_shows_and_sets_a_jobs_alerts(make_job: Callable[..., Job]) -> None:
    make_job("nightly")
    assert _jobs("alerts", "nightly") == "nightly: channels default, reasons all, muted no\n"
    assert _jobs("alerts", "nightly", "--channels", "email", "--reasons", "lost,running_long") == (
        "nightly: channels email, reasons lost, running_long, muted no\n"
    )
    job = Job.objects.get(name="nightly")
    assert (job.alert_channels, job.alert_reasons) == ("email", ["lost", "running_long"])
    entry = AuditEntry.objects.filter(job=job).order_by("-id").first()
    assert entry is not None and entry.after == {
        "alert_channels": "email",
        "alert_reasons": ["lost", "running_long"],
    }
    with pytest.raises(CommandError, match="--reasons: Unknown reason"):
        _jobs("alerts", "nightly", "--reasons", "late")
    with pytest.raises(CommandError, match=r"Unknown reason\(s\) stuck: .* \(stuck is now "):
        _jobs("alerts", "nightly", "--reasons", "stuck")
    _jobs("alerts", "nightly", "--reasons", "all")
    assert Job.objects.get(name="nightly").alert_reasons == []


def test_a_continuous_jobs_lost_tenure_is_resolved_by_the_tenure_that_took_over(
    tmp_path: Path,
) -> None:
    job = new_job("poller", "tests.continuous.step", None, log=tmp_path / "continuous.log")
    first = lease.acquire(job.lock_key, "a@h:1:continuous", 30)
    assert first is not None
    dead = tenures.begin(job_id=job.pk, key=first.key, token=first.token, node="a@h", pid=1)
    assert lease.force_release(job.lock_key)  # its node died: the lease lapsed
    taken = lease.acquire(job.lock_key, "b@h:1:continuous", 30)
    assert taken is not None
    # One statement records the dead node's tenure lost and the new one running.
    moved = tenures.begin(job_id=job.pk, key=taken.key, token=taken.token, node="b@h", pid=2)
    assert moved.orphans_closed == 1
    incident = Incident.objects.get(job=job)
    assert (incident.kind, incident.reason) == ("failing", "lost")
    assert incident.last_run_id == dead.run_id
    # The job runs again on a live node: the incident is over, told once each way.
    assert incident.resolved_at is not None and incident.resolved_by_run_id == moved.run_id
    assert _events(job) == [
        ("opened", "email"),
        ("opened", "webhook"),
        ("resolved", "email"),
        ("resolved", "webhook"),
    ]


def test_a_tenure_lost_with_no_live_successor_keeps_its_incident_open(tmp_path: Path) -> None:
    job = new_job("poller", "tests.continuous.step", None, log=tmp_path / "continuous.log")
    held = lease.acquire(job.lock_key, "a@h:1:continuous", 30)
    assert held is not None
    tenures.begin(job_id=job.pk, key=held.key, token=held.token, node="a@h", pid=1)
    assert lease.force_release(job.lock_key)
    assert len(tenures.close_orphans()) == 1
    assert Incident.objects.get(job=job).resolved_at is None


def test_the_admin_shows_no_next_attempt_for_a_dropped_delivery(
    make_job: Callable[..., Job], admin_client: Client, alerts_to: Callable[..., None]
) -> None:
    alerts_to()  # no channel configured: the notifications are dropped, never tried again
    job = make_job("flaky", task="tests.fail")
    run_here(job)
    assert sender.drain("test-sender") == 2
    assert set(AlertDelivery.objects.values_list("state", flat=True)) == {"dropped"}
    run_here(make_job("other", task="tests.fail"))  # two pending ones: they have one
    dropped_page = f"/admin/jobs/incident/{job.incidents.get().pk}/change/"
    for url, expected in (
        ("/admin/jobs/alertdelivery/", {"dropped": 2, "pending": 2}),
        (dropped_page, {"dropped": 2}),
    ):
        page = admin_client.get(url).content.decode()
        cells = [
            re.sub(r"<[^>]+>", "", cell).strip()
            for cell in re.findall(r'class="field-next_attempt[^"]*">(.*?)</td>', page, re.S)
        ]
        assert cells.count("-") == expected["dropped"], (url, cells)
        assert len(cells) - cells.count("-") == expected.get("pending", 0), (url, cells)
    dropped = AlertDelivery.objects.filter(state="dropped").first()
    assert dropped is not None
    page = admin_client.get(f"/admin/jobs/alertdelivery/{dropped.pk}/change/").content.decode()
    shown = re.search(r'field-next_attempt.*?<div class="readonly">(.*?)</div>', page, re.S)
    assert shown is not None and shown.group(1).strip() == "-"
