"""Adoption of django-celery-beat entries that no job owns (``jobs.beat.adoption``), on real
PostgreSQL: what carries over, what is refused and why, one job however many beats adopt at
once, the change log naming new entries, and edits flowing both ways."""

from __future__ import annotations

import io
import json
import zoneinfo
from datetime import timedelta
from typing import Any

import pytest
from django.core.management import call_command
from django.test import Client
from django.utils import timezone
from django_celery_beat.models import (
    ClockedSchedule,
    CrontabSchedule,
    IntervalSchedule,
    PeriodicTask,
    SolarSchedule,
)

from jobs import services
from jobs.audit import Actor
from jobs.beat import adoption, changelog
from jobs.beat import entries as beat_link
from jobs.beat.scheduler import ClusterScheduler
from jobs.models import Job, ScheduleChange, ScheduleError
from jobs.schedule.kinds import At, Cron, Every, Solar
from project.celery import app
from tests.support.forms import job_form_data
from tests.support.threads_at_once import at_once

pytestmark = pytest.mark.django_db(transaction=True)

APPEND = "tests.support.plain_tasks.append"
TESTS = Actor.code("tests")


def _hourly() -> IntervalSchedule:
    # As django-celery-beat's README shows it.
    schedule, _ = IntervalSchedule.objects.get_or_create(every=1, period=IntervalSchedule.HOURS)
    return schedule


def _entry(name: str, task: str = APPEND, **fields: Any) -> PeriodicTask:
    fields.setdefault("interval", _hourly())
    fields.setdefault("args", json.dumps(["/tmp/never-written"]))
    return PeriodicTask.objects.create(name=name, task=task, **fields)


def _beat() -> ClusterScheduler:
    return ClusterScheduler(app=app, maintain=False)


def _tick(beat: ClusterScheduler) -> None:
    beat.tick_at(timezone.now())


def test_an_interval_entry_carries_everything_over_and_stays_the_jobs_entry() -> None:
    entry = _entry(
        "Importing contacts",
        args=json.dumps(["/tmp/log"]),
        kwargs=json.dumps({"note": "contacts"}),
        queue="imports",
        exchange="imports-x",
        routing_key="imports.contacts",
        priority=5,
        expire_seconds=120,
        description="Nightly contacts import",
    )
    [verdict] = adoption.adopt()
    assert verdict.adoptable
    job = Job.objects.select_related("periodic_task").get(name="Importing contacts")
    assert job.adopted and job.periodic_task == entry
    assert (job.task, job.args, job.kwargs) == (APPEND, ["/tmp/log"], {"note": "contacts"})
    routing = ("imports", "imports-x", "imports.contacts")
    assert (job.queue, job.exchange, job.routing_key) == routing
    assert (job.priority, job.start_deadline) == (5, 120)
    assert (job.enabled, job.description) == (True, "Nightly contacts import")
    assert beat_link.schedule_of(job.periodic_task) == Every(3600)
    entry.refresh_from_db()
    assert entry.name == "Importing contacts"  # left as it was


@pytest.mark.parametrize(
    ("entry_name", "job_name"),
    [("reports/nightly", "reports\u2215nightly"), (" nightly ", "\u2420nightly\u2420")],
)
def test_an_entry_named_as_no_job_can_be_is_adopted_under_the_name_its_key_would_get(
    entry_name: str, job_name: str
) -> None:
    # Lossless: the schedule keeps running, under a name the API's URLs and listings can show.
    entry = _entry(entry_name)
    [verdict] = adoption.adopt()
    assert verdict.adoptable, verdict.reason
    assert Job.objects.get(name=job_name).periodic_task == entry
    entry.refresh_from_db()
    assert entry.name == entry_name


def test_crontab_with_its_zone_and_clocked_one_off_entries_are_adopted() -> None:
    crontab = CrontabSchedule.objects.create(
        minute="30", hour="7", day_of_week="1", timezone=zoneinfo.ZoneInfo("Canada/Pacific")
    )
    _entry("weekly", crontab=crontab, interval=None)
    when = (timezone.now() + timedelta(days=1)).replace(microsecond=0)
    clocked = ClockedSchedule.objects.create(clocked_time=when)
    _entry("once", clocked=clocked, interval=None, one_off=True)
    assert all(verdict.adoptable for verdict in adoption.adopt())
    weekly = Job.objects.select_related("periodic_task__crontab").get(name="weekly")
    assert beat_link.schedule_of(weekly.periodic_task) == Cron("30 7 * * 1", "Canada/Pacific")
    once = Job.objects.select_related("periodic_task__clocked").get(name="once")
    assert beat_link.schedule_of(once.periodic_task) == At(when)


def test_an_entry_without_a_queue_keeps_its_tasks_routing() -> None:
    _entry("routed")
    adoption.adopt()
    assert Job.objects.get(name="routed").queue == app.conf.task_default_queue


@pytest.mark.parametrize(
    ("fields", "reason"),
    [
        pytest.param({"task": "billing.gone"}, "task 'billing.gone' is not registered", id="task"),
        pytest.param({"task": "celery.chord_unlock"}, "is not registered", id="celery-own"),
        pytest.param({"kwargs": "{oops"}, "its kwargs are not JSON", id="kwargs-json"),
        pytest.param({"args": '{"a": 1}'}, "its args must be a JSON list", id="args-type"),
        pytest.param({"priority": 200}, "priority: Ensure this value is less than", id="priority"),
        pytest.param({"queue": "a\nb"}, "queue: A queue name cannot contain", id="queue"),
        pytest.param({"exchange": "a\rb"}, "exchange: An exchange name cannot", id="exchange"),
        pytest.param(
            {"routing_key": "a\u2028b"}, "routing_key: A routing key cannot", id="routing-key"
        ),
    ],
)
def test_an_entry_that_cannot_be_adopted_is_reported_with_its_reason(
    fields: dict[str, Any], reason: str
) -> None:
    _entry("bad", **fields)
    _entry("good")
    verdicts = {verdict.name: verdict for verdict in adoption.adopt()}
    assert not verdicts["bad"].adoptable and reason in verdicts["bad"].reason
    assert verdicts["good"].adoptable
    assert list(Job.objects.values_list("name", flat=True)) == ["good"]


def test_solar_entries_are_adopted_scheduled_and_kept_by_the_admin(admin_client: Client) -> None:
    solar = SolarSchedule.objects.create(event="sunrise", latitude=48.85, longitude=2.35)
    entry = _entry("at dawn", solar=solar, interval=None, queue="dawn")
    beat = _beat()
    _tick(beat)
    job = Job.objects.select_related("periodic_task__solar").get(name="at dawn")
    assert job.adopted and job.periodic_task == entry
    schedule = beat_link.schedule_of(job.periodic_task)
    assert schedule == Solar("sunrise", 48.85, 2.35)
    assert beat._entries[job.pk].schedule == schedule
    assert not ScheduleError.objects.filter(job=job).exists()

    page = admin_client.get(f"/admin/jobs/job/{job.pk}/change/").content.decode()
    assert "solar (kept as its entry says)" in page
    # Saving the job's page for another field keeps the entry's solar schedule.
    data = job_form_data(
        name="at dawn", task=APPEND, schedule_type="solar", queue="mornings",
        args='["/tmp/never-written"]', kwargs="{}",
    )  # fmt: skip
    response = admin_client.post(f"/admin/jobs/job/{job.pk}/change/", data)
    assert response.status_code == 302, response.content.decode()[:2000]
    entry.refresh_from_db()
    assert (entry.queue, entry.solar_id, entry.interval_id) == ("mornings", solar.pk, None)
    listed = admin_client.get("/admin/jobs/job/").content.decode()
    assert "daily at sunrise (48.85, 2.35)" in listed


def test_an_edit_of_a_solar_row_reaches_the_beat_within_a_tick() -> None:
    solar = SolarSchedule.objects.create(event="sunrise", latitude=48.85, longitude=2.35)
    _entry("at dawn", solar=solar, interval=None)
    beat = _beat()
    _tick(beat)
    job = Job.objects.get(name="at dawn")
    SolarSchedule.objects.filter(pk=solar.pk).update(event="sunset")  # as SQL would
    _tick(beat)
    assert beat._entries[job.pk].schedule == Solar("sunset", 48.85, 2.35)


def test_a_solar_choice_is_only_offered_for_a_solar_job(admin_client: Client) -> None:
    page = admin_client.get("/admin/jobs/job/add/").content.decode()
    assert "solar (kept" not in page
    response = admin_client.post("/admin/jobs/job/add/", job_form_data(schedule_type="solar"))
    assert response.status_code == 200 and "Select a valid choice" in response.content.decode()
    assert not Job.objects.exists()


def test_name_collisions_are_reported() -> None:
    services.create_job(
        services.JobDefinition(name="taken", task=APPEND, schedule=Every(60), args=["l"]),
        actor=TESTS,
    )
    _entry("taken")
    verdicts = {verdict.name: verdict.reason for verdict in adoption.preview()}
    assert "a job named 'taken' already exists" in verdicts["taken"]


def test_jobs_adopt_dry_run_lists_what_would_and_would_not_be_adopted() -> None:
    _entry("fine")
    _entry("unknown", task="billing.gone")
    out = io.StringIO()
    call_command("jobs", "adopt", "--dry-run", stdout=out)
    lines = out.getvalue().splitlines()
    assert lines[0] == f"fine ({APPEND}), from the django-celery-beat row:"
    assert lines[1] == "  becomes job 'fine': every hour"
    assert lines[2].startswith("  next slots, Celery:  ")
    assert lines[3].startswith("  next slots, cluster: ")
    assert lines[4] == "unknown (billing.gone), from the django-celery-beat row:"
    assert lines[5].startswith("  cannot be carried over, would not run: its task 'billing.gone'")
    assert lines[-1] == "2 periodic task(s): 1 carried over, 1 not (dry run: nothing changed)"
    assert not Job.objects.exists()
    out = io.StringIO()
    call_command("jobs", "adopt", "--json", stdout=out)
    records = {record["name"]: record for record in json.loads(out.getvalue())}
    assert records["fine"]["adoptable"] and not records["unknown"]["adoptable"]
    assert list(Job.objects.values_list("name", flat=True)) == ["fine"]


def test_beats_adopting_the_same_entries_at_once_make_one_job_each() -> None:
    for n in range(5):
        _entry(f"entry-{n}")
    results = at_once(4, adoption.adopt, timeout=30)
    assert Job.objects.count() == 5
    adopted = sorted(verdict.name for result in results for verdict in result)
    assert adopted == [f"entry-{n}" for n in range(5)]  # each reported adopted once
    assert all(verdict.adoptable for result in results for verdict in result)


def test_the_change_log_names_new_and_edited_entries_without_a_job() -> None:
    position = changelog.newest_id()
    entry = _entry("new")
    PeriodicTask.objects.filter(pk=entry.pk).update(enabled=False)
    changes = changelog.read_after(position, 100)
    assert changes.periodic_task_ids == {entry.pk} and not changes.job_ids
    assert ScheduleChange.objects.filter(periodic_task_id=entry.pk).count() == 2


def test_a_running_beat_adopts_an_entry_added_or_enabled_through_the_models() -> None:
    beat = _beat()
    _tick(beat)
    disabled = _entry("later", enabled=False)
    _entry("added")
    _tick(beat)
    _tick(beat)  # the jobs adoption made are in the log too: the next tick loads them
    jobs = dict(Job.objects.values_list("name", "enabled"))
    assert jobs == {"added": True, "later": False}  # a disabled entry: a paused job
    assert set(beat._entries) == {Job.objects.get(name="added").pk}
    disabled.enabled = True
    disabled.save()
    _tick(beat)
    assert set(beat._entries) == set(Job.objects.values_list("pk", flat=True))


def test_code_rewriting_its_entry_at_deploy_reaches_the_adopted_job() -> None:
    beat = _beat()
    _entry("deploy", kwargs=json.dumps({"note": "v1"}))
    _tick(beat)
    every_minute, _ = IntervalSchedule.objects.get_or_create(
        every=1, period=IntervalSchedule.MINUTES
    )
    # What deploy-time code does, as django-celery-beat users write it.
    PeriodicTask.objects.update_or_create(
        name="deploy",
        defaults={
            "task": APPEND,
            "interval": every_minute,
            "kwargs": json.dumps({"note": "v2"}),
            "args": json.dumps(["/tmp/other"]),
        },
    )
    _tick(beat)
    job = Job.objects.select_related("periodic_task__interval").get(name="deploy")
    assert (job.args, job.kwargs) == (["/tmp/other"], {"note": "v2"})
    assert beat_link.schedule_of(job.periodic_task) == Every(60)
    assert beat._entries[job.pk].schedule == Every(60)


def test_an_operators_edit_of_an_adopted_job_is_written_to_its_entry() -> None:
    entry = _entry("edited")
    adoption.adopt()
    job = services.get_job("edited")
    job.kwargs = {"note": "from the admin"}
    services.save_job(job, Cron("0 3 * * *", "Europe/Paris"), actor=TESTS)
    services.pause("edited", actor=TESTS)
    entry.refresh_from_db()
    assert entry.name == "edited" and entry.task == APPEND
    assert json.loads(entry.kwargs) == {"note": "from the admin"}
    assert entry.crontab is not None and str(entry.crontab.timezone) == "Europe/Paris"
    assert not entry.enabled
    # The beat finds nothing to copy back: the entry holds the job's values.
    assert adoption.sync([job.pk]) == {}
    assert Job.objects.get(pk=job.pk).kwargs == {"note": "from the admin"}


def test_an_entry_edited_to_an_unknown_task_sets_its_job_aside(
    caplog: pytest.LogCaptureFixture,
) -> None:
    beat = _beat()
    entry = _entry("breaks")
    _entry("keeps")
    _tick(beat)
    _tick(beat)
    broken = Job.objects.get(name="breaks")
    entry.task = "billing.gone"
    entry.save()
    _tick(beat)
    assert broken.pk not in beat._entries
    assert "'billing.gone' is not registered" in ScheduleError.objects.get(job=broken).error
    assert Job.objects.get(pk=broken.pk).task == APPEND  # not the unknown one
    assert Job.objects.get(name="keeps").pk in beat._entries


def test_a_beat_start_reports_entries_it_cannot_adopt(caplog: pytest.LogCaptureFixture) -> None:
    _entry("unknown", task="billing.gone")
    _entry("fine")
    with caplog.at_level("ERROR", logger="jobs.beat.adoption"):
        _tick(_beat())
    [record] = [r for r in caplog.records if getattr(r, "action", "") == "not_adoptable"]
    assert "'unknown' cannot be adopted" in record.getMessage()
    assert list(Job.objects.values_list("name", flat=True)) == ["fine"]


def test_the_admin_job_list_warns_of_entries_that_cannot_be_adopted(admin_client: Client) -> None:
    _entry("unknown", task="billing.gone")
    response = admin_client.get("/admin/jobs/job/")
    [message] = [str(m) for m in response.context["messages"]]
    assert message.startswith("django-celery-beat row 'unknown' (billing.gone) is not adopted")
