"""The one write path for operator actions (jobs.services), against real PostgreSQL: what each
action refuses (with the field it names), what it stores, and the audit entry it records. The
admin, the CLI and the API call these; their own tests check how each edge shows the result."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone
from django_celery_beat.models import PeriodicTask

from jobs import services
from jobs.audit import Actor
from jobs.exceptions import BlackoutNotFound, IdempotencyKeyReused, JobNotFound, LeaseLost
from jobs.guard import lease, run_records
from jobs.models import (
    AuditAction,
    AuditEntry,
    Blackout,
    Job,
    JobKind,
    JobRun,
    RunStatus,
    Trigger,
)
from jobs.schedule.kinds import At, Every, Triggered
from tests.integration.conftest import Published
from tests.support.job_factory import new_job
from tests.support.pauses import paused as paused_state

pytestmark = pytest.mark.django_db

OPERATOR = Actor.code("tests")


def _audit(action: AuditAction) -> list[AuditEntry]:
    return list(AuditEntry.objects.filter(action=action).order_by("id"))


def _field_errors(info: pytest.ExceptionInfo[ValidationError]) -> dict[str, list[str]]:
    return info.value.message_dict


def test_a_job_is_found_by_name_and_a_missing_one_named() -> None:
    job = new_job("report", log="/dev/null")
    assert services.get_job("report").pk == job.pk
    with pytest.raises(JobNotFound, match="no job named 'nope'"):
        services.get_job("nope")
    with pytest.raises(JobNotFound):
        services.get_job("re\x00port")  # no query PostgreSQL would refuse


def test_creating_a_periodic_job_stores_its_beat_entry_and_records_the_addition() -> None:
    job = new_job("report", schedule=Every(300), log="/dev/null")
    assert job.kind == JobKind.PERIODIC and job.periodic_task is not None
    assert services.definition_of(job) == Every(300)
    (added,) = _audit(AuditAction.ADD)
    assert added.job_id == job.pk and added.after is not None and added.after["name"] == "report"


def test_a_job_is_of_the_kind_its_definition_says() -> None:
    assert services.kind_of(None) == JobKind.CONTINUOUS
    assert services.kind_of(Triggered()) == JobKind.TRIGGERED
    assert services.kind_of(Every(60)) == JobKind.PERIODIC
    triggered = new_job("downstream", schedule=Triggered(), log="/dev/null")
    assert triggered.periodic_task is None
    assert services.definition_of(triggered) == Triggered()


def test_creation_refuses_unknown_policies_and_arguments_the_function_cannot_take() -> None:
    with pytest.raises(ValidationError) as unknown:
        new_job("a", log="/dev/null", colour="red")
    assert _field_errors(unknown) == {"colour": ["Unknown policy."]}
    with pytest.raises(ValidationError) as arguments:
        new_job("b", kwargs={"log": "/dev/null", "volume": 11})
    assert "unexpected keyword argument 'volume'" in " ".join(_field_errors(arguments)["kwargs"])
    with pytest.raises(ValidationError) as key:
        new_job("c", "tests.by_city", kwargs={"log": "/dev/null", "city": "x" * 300})
    assert "lock key" in " ".join(_field_errors(key)["kwargs"])
    assert not Job.objects.exists() and not AuditEntry.objects.exists()


def test_a_one_off_time_past_its_start_deadline_is_refused() -> None:
    past = timezone.now() - timedelta(hours=1)
    with pytest.raises(ValidationError) as info:
        new_job("late", schedule=At(past), log="/dev/null", start_deadline=60)
    assert "is past, by more than the start deadline (60 s)" in _field_errors(info)["run_at"][0]
    soon = new_job("soon", schedule=At(timezone.now() + timedelta(minutes=5)), log="/dev/null")
    assert soon.kind == JobKind.PERIODIC


def test_saving_a_periodic_job_as_triggered_drops_its_beat_entry_and_records_the_change() -> None:
    job = new_job("report", schedule=Every(60), log="/dev/null")
    entry_id = job.periodic_task_id
    job.lease_ttl = 45
    services.save_job(job, Triggered(), actor=OPERATOR)
    job.refresh_from_db()
    assert job.kind == JobKind.TRIGGERED and job.periodic_task is None
    assert not PeriodicTask.objects.filter(pk=entry_id).exists()
    (edit,) = _audit(AuditAction.EDIT)
    assert edit.before is not None and edit.after is not None
    assert edit.after["lease_ttl"] == 45 and edit.before["lease_ttl"] != 45
    assert edit.before["kind"] == JobKind.PERIODIC and edit.after["kind"] == JobKind.TRIGGERED


def test_pause_and_resume_record_what_the_job_was() -> None:
    new_job("report", log="/dev/null")
    services.pause("report", actor=OPERATOR)
    services.pause("report", actor=OPERATOR)  # recorded even though it already was
    services.resume("report", actor=OPERATOR)
    assert Job.objects.get(name="report").enabled
    paused = _audit(AuditAction.PAUSE)
    by = str(OPERATOR)
    assert [entry.before for entry in paused] == [{"enabled": True}, paused_state(by)]
    (resumed,) = _audit(AuditAction.RESUME)
    assert (resumed.before, resumed.after) == (paused_state(by), {"enabled": True})


def test_mute_and_alert_settings_are_stored_and_audited() -> None:
    new_job("report", log="/dev/null")
    until = datetime(2100, 1, 1, tzinfo=UTC)
    muted = services.mute("report", until, actor=OPERATOR)
    assert muted.alerts_muted_until == until
    services.mute("report", None, actor=OPERATOR)
    assert Job.objects.get(name="report").alerts_muted_until is None
    edits = _audit(AuditAction.EDIT)
    assert edits[0].after == {"alerts_muted_until": until.isoformat()}
    assert edits[1].before == {"alerts_muted_until": until.isoformat()}
    assert edits[1].after == {"alerts_muted_until": None}


def test_removing_a_job_deletes_its_beat_entry_and_keeps_its_name_in_the_audit() -> None:
    job = new_job("report", schedule=Every(60), log="/dev/null")
    entry_id = job.periodic_task_id
    services.remove("report", actor=OPERATOR)
    assert not Job.objects.filter(name="report").exists()
    assert not PeriodicTask.objects.filter(pk=entry_id).exists()
    (deleted,) = _audit(AuditAction.DELETE)
    assert deleted.job_name == "report" and deleted.before is not None
    with pytest.raises(JobNotFound):
        services.remove("report", actor=OPERATOR)


def test_a_run_now_merges_its_keyword_arguments_into_the_jobs(published: Published) -> None:
    job = new_job("report", log="/dev/null")
    run = services.run_now("report", actor=OPERATOR, kwargs={"seconds": 0.5})
    assert run.kwargs == {"log": "/dev/null", "seconds": 0.5}
    assert run.trigger == Trigger.MANUAL and run.job_id == job.pk
    (entry,) = _audit(AuditAction.RUN_NOW)
    assert entry.after == {
        "run": run.pk, "trigger": "manual", "idempotency_key": "",
        "kwargs": {"log": "/dev/null", "seconds": 0.5},
    }  # fmt: skip
    plain = services.run_now("report", actor=OPERATOR)
    assert plain.kwargs is None  # the job's own, as for every run


def test_run_keyword_arguments_are_checked_against_the_function() -> None:
    job = new_job("report", log="/dev/null")
    assert services.run_kwargs(job, None) is None
    with pytest.raises(ValidationError) as not_an_object:
        services.run_kwargs(job, ["a"])
    assert "must be a JSON object" in _field_errors(not_an_object)["kwargs"][0]
    with pytest.raises(ValidationError) as unexpected:
        services.run_kwargs(job, {"volume": 11})
    assert "unexpected keyword argument 'volume'" in _field_errors(unexpected)["kwargs"][0]


def test_a_run_once_records_its_one_run_once(published: Published) -> None:
    new_job("report", log="/dev/null")
    run, created = services.run_once("report", "key-1", actor=OPERATOR, kwargs={"seconds": 1})
    again, created_again = services.run_once(
        "report", "key-1", actor=OPERATOR, kwargs={"seconds": 1}
    )
    assert created and not created_again and again.pk == run.pk
    assert len(_audit(AuditAction.RUN_NOW)) == 1
    with pytest.raises(IdempotencyKeyReused):
        services.run_once("report", "key-1", actor=OPERATOR, kwargs={"seconds": 2})
    assert JobRun.objects.count() == 1


def test_a_blackout_window_is_added_removed_and_audited() -> None:
    new_job("report", log="/dev/null")
    starts = datetime(2100, 1, 1, tzinfo=UTC)
    window = services.add_blackout(
        "freeze", starts, starts + timedelta(hours=2), actor=OPERATOR, job_name="report"
    )
    assert services.blackout_values(window) == {
        "name": "freeze", "job": "report", "starts_at": starts.isoformat(),
        "ends_at": (starts + timedelta(hours=2)).isoformat(), "description": "",
    }  # fmt: skip
    services.remove_blackout("freeze", actor=OPERATOR)
    assert not Blackout.objects.exists()
    (added,) = _audit(AuditAction.BLACKOUT_ADD)
    (removed,) = _audit(AuditAction.BLACKOUT_REMOVE)
    assert added.target == removed.target == "blackout:freeze"
    with pytest.raises(BlackoutNotFound):
        services.remove_blackout("freeze", actor=OPERATOR)


def test_a_blackout_of_an_unknown_job_or_backwards_is_refused_on_its_field() -> None:
    starts = datetime(2100, 1, 1, tzinfo=UTC)
    with pytest.raises(ValidationError) as unknown:
        services.add_blackout(
            "freeze", starts, starts + timedelta(hours=1), actor=OPERATOR, job_name="nope"
        )
    assert "no job named 'nope'" in _field_errors(unknown)["job"][0]
    with pytest.raises(ValidationError):
        services.add_blackout("backwards", starts, starts - timedelta(hours=1), actor=OPERATOR)
    assert not Blackout.objects.exists()


def test_releasing_a_lease_records_its_holder_and_the_token_still_grows() -> None:
    job = new_job("report", log="/dev/null")
    assert lease.acquire(job.lock_key, "worker@a:1:run-5", 60) is not None
    assert services.release_lease("report", actor=OPERATOR)
    assert lease.current_holder(job.lock_key) is None
    (entry,) = _audit(AuditAction.RELEASE_LEASE)
    assert entry.before == {"holder": "worker@a:1:run-5", "token": 1, "live": True}
    assert entry.after == {"holder": "worker@a:1:run-5", "token": 1, "live": False}
    assert not services.release_lease("report", actor=OPERATOR)  # none live: recorded so
    assert _audit(AuditAction.RELEASE_LEASE)[-1].before == {"live": False}
    taken = lease.acquire(job.lock_key, "worker@b:2:run-6", 60)
    assert taken is not None and taken.token == 2


# --- a run cancelled (celery control revoke: jobs.guard.revocation) --------------------------

REVOKED = "revoked: tests"


def _run(job: Job) -> JobRun:
    return JobRun.objects.create(job=job, scheduled_for=timezone.now(), trigger=Trigger.MANUAL)


def _claimed_run(job: Job) -> tuple[JobRun, int]:
    """A run claimed with its lease, and its token."""
    run = _run(job)
    claim = run_records.claim(run.pk, node="node-x", pid=1, task_id="t", holder="node-x:1:run")
    assert claim is not None and claim.lease is not None
    run.refresh_from_db()
    return run, claim.lease.token


def test_a_scheduled_run_cancelled_is_never_claimed_and_the_cancel_audited() -> None:
    run = _run(new_job("report", log="/dev/null"))
    cancelled = services.cancel_run(run.pk, actor=OPERATOR, reason=REVOKED, node="w@h")
    assert cancelled is not None and cancelled.status == RunStatus.CANCELLED
    assert cancelled.error == REVOKED and cancelled.finished_at is not None
    assert run_records.claim(run.pk, node="n", pid=1, task_id="t") is None  # a late delivery
    (entry,) = _audit(AuditAction.CANCEL)
    assert (entry.target, entry.actor) == (f"run:{run.pk}", "code:tests")
    assert entry.before == {"status": "scheduled"}
    assert entry.after == {"status": "cancelled", "error": REVOKED, "node": "w@h"}
    # Once: a second revoke (another worker's, a later delivery's) records nothing.
    assert services.cancel_run(run.pk, actor=OPERATOR, reason=REVOKED) is None
    assert len(_audit(AuditAction.CANCEL)) == 1


def test_a_running_run_is_cancelled_only_when_its_process_was_stopped() -> None:
    job = new_job("report", log="/dev/null")
    run, token = _claimed_run(job)
    assert services.cancel_run(run.pk, actor=OPERATOR, reason=REVOKED) is None  # runs on
    assert JobRun.objects.get(pk=run.pk).status == RunStatus.RUNNING
    cancelled = services.cancel_run(run.pk, actor=OPERATOR, reason=REVOKED, running=True)
    assert cancelled is not None and cancelled.status == RunStatus.CANCELLED
    # Its lease given back with its token: the token can write no more, the next run takes it.
    with pytest.raises(LeaseLost), transaction.atomic():
        lease.verify_held(job.lock_key, token)
    assert lease.acquire(job.lock_key, "next", 30) is not None


def test_a_running_run_still_waiting_for_its_lease_is_cancelled_without_one() -> None:
    run = _run(new_job("report", log="/dev/null", overlap="wait"))
    claim = run_records.claim(run.pk, node="node-x", pid=1, task_id="t")  # no lease taken
    assert claim is not None and claim.lease is None
    cancelled = services.cancel_run(run.pk, actor=OPERATOR, reason=REVOKED, running=True)
    assert cancelled is not None and cancelled.status == RunStatus.CANCELLED
    assert cancelled.fencing_token is None


def test_a_cancel_racing_the_runs_own_finish_leaves_one_outcome() -> None:
    job = new_job("report", log="/dev/null")
    first, first_token = _claimed_run(job)
    services.cancel_run(first.pk, actor=OPERATOR, reason=REVOKED, running=True)
    late = run_records.finish_fenced(
        first.pk, key=job.lock_key, token=first_token, status=RunStatus.SUCCEEDED
    )
    assert late.status is None  # the killed run's finish, had it come, is refused
    assert JobRun.objects.get(pk=first.pk).status == RunStatus.CANCELLED

    second, second_token = _claimed_run(job)
    run_records.finish_fenced(
        second.pk, key=job.lock_key, token=second_token, status=RunStatus.SUCCEEDED
    )
    assert services.cancel_run(second.pk, actor=OPERATOR, reason=REVOKED, running=True) is None
    assert JobRun.objects.get(pk=second.pk).status == RunStatus.SUCCEEDED
    assert [entry.target for entry in _audit(AuditAction.CANCEL)] == [f"run:{first.pk}"]


def test_a_cancel_after_the_lease_lapsed_records_the_run_lost_not_cancelled() -> None:
    job = new_job("report", log="/dev/null")
    run, _token = _claimed_run(job)
    lease.force_release(job.lock_key)
    assert services.cancel_run(run.pk, actor=OPERATOR, reason=REVOKED, running=True) is None
    assert JobRun.objects.get(pk=run.pk).status == RunStatus.LOST
    assert _audit(AuditAction.CANCEL) == []


def test_a_continuous_tenure_is_not_cancelled_by_a_revoke() -> None:
    job = new_job("poller", schedule=None, log="/dev/null")
    tenure = JobRun.objects.create(
        job=job, scheduled_for=timezone.now(), trigger=Trigger.CONTINUOUS, status=RunStatus.RUNNING
    )
    assert services.cancel_run(tenure.pk, actor=OPERATOR, reason=REVOKED, running=True) is None
    assert JobRun.objects.get(pk=tenure.pk).status == RunStatus.RUNNING
