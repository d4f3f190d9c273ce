"""Calendars with real processes: two beats and a worker. A blackout window over a 1-second job,
a few seconds long, records exactly the slots inside it skipped (naming the window) while every
other slot runs once; a job whose holiday calendar has a public holiday today (in its time zone)
records its slot skipped naming the holiday, while the same schedule without the calendar runs."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

import holidays
import pytest
from django.utils import timezone

from jobs import services
from jobs.audit import Actor
from jobs.models import JobRun, RunStatus
from jobs.schedule.kinds import Cron, Every
from tests.acceptance.conftest import Cluster, wait_for
from tests.support.job_factory import new_job

pytestmark = pytest.mark.acceptance

ACTOR = Actor.code("tests")
# Zones from UTC-11 to UTC+14: between them, a slot falls on two or three local dates.
ZONES = (
    "Pacific/Pago_Pago", "Pacific/Honolulu", "America/Anchorage", "America/Los_Angeles",
    "America/Denver", "America/Chicago", "America/New_York", "America/Sao_Paulo",
    "Atlantic/Cape_Verde", "UTC", "Europe/Berlin", "Europe/Athens", "Europe/Moscow",
    "Asia/Dubai", "Asia/Karachi", "Asia/Dhaka", "Asia/Bangkok", "Asia/Shanghai", "Asia/Tokyo",
    "Australia/Brisbane", "Pacific/Noumea", "Pacific/Auckland", "Pacific/Tongatapu",
    "Pacific/Kiritimati",
)  # fmt: skip


def _holiday_in_reach(at: datetime) -> tuple[str, str, str]:
    """A (country, zone, holiday name) with a public holiday on the local date of ``at`` (and of
    the minutes around it) in that zone. Every date of the year has one somewhere within a day,
    and the zones reach the dates on either side of UTC's."""
    for zone, country in itertools.product(ZONES, sorted(holidays.list_supported_countries())):
        if len(country) != 2:
            continue
        days = {(at + timedelta(minutes=m)).astimezone(ZoneInfo(zone)).date() for m in (-1, 3)}
        if len(days) != 1:
            continue  # near midnight there: the slot might fall on the next day
        name = holidays.country_holidays(country, years=next(iter(days)).year).get(days.pop())
        if name:
            return country, zone, name
    raise AssertionError(f"no public holiday on any local date of {at} in {ZONES}")


def test_a_blackout_and_a_holiday_skip_exactly_their_slots(
    cluster: Cluster, tmp_path: Path
) -> None:
    log = tmp_path / "executions.log"
    # The minute jobs' slots are whole minutes, which a frozen second may be too: their lines
    # go elsewhere, so that the check of what ran in the window reads the windowed job's alone.
    minute_log = tmp_path / "minute-jobs.log"
    now = timezone.now()
    country, zone, holiday = _holiday_in_reach(now)
    every_second = new_job("every-second", schedule=Every(1), log=log, queue=cluster.queue)
    each_minute = Cron(expr="* * * * *", tz=zone)
    on_holiday = new_job(
        "on-holiday", schedule=each_minute, log=minute_log, queue=cluster.queue,
        holiday_calendar=country,
    )  # fmt: skip
    control = new_job("control", schedule=each_minute, log=minute_log, queue=cluster.queue)
    for name in ("beat-1", "beat-2"):
        cluster.start_beat(name)
    cluster.start_worker("worker")
    # The window is placed once a beat fires the job (a slot's blackout is read as its run is
    # inserted): a beat slower to start than a window set ahead of time (a loaded machine) would
    # meet it begun and catch up over it, which is not what this test is about.
    wait_for(
        lambda: JobRun.objects.filter(job=every_second).exists(), timeout=120, what="a beat up"
    )
    starts = (timezone.now() + timedelta(seconds=4)).replace(microsecond=0)
    services.add_blackout(
        "freeze", starts, starts + timedelta(seconds=4), actor=ACTOR, job_name=every_second.name
    )
    wait_for(
        lambda: (
            JobRun.objects.filter(job=on_holiday).exists()
            and JobRun.objects.filter(job=control, status=RunStatus.SUCCEEDED).exists()
            and JobRun.objects.filter(
                job=every_second, scheduled_for__gte=starts + timedelta(seconds=6)
            ).exists()
        ),
        timeout=120,
        what="a holiday slot, and the blackout passed",
    )

    for status, error in JobRun.objects.filter(job=on_holiday).values_list("status", "error"):
        assert status == RunStatus.SKIPPED
        assert error.startswith(f"holiday: {holiday} on ") and error.endswith(f"({country})")

    second_slots = list(
        JobRun.objects.filter(job=every_second, scheduled_for__lt=starts + timedelta(seconds=6))
        .order_by("scheduled_for")
        .values_list("scheduled_for", "status", "error")
    )
    slots = [slot for slot, _, _ in second_slots]
    assert len(slots) == len(set(slots)), "a slot has two records"
    assert {b - a for a, b in itertools.pairwise(slots)} == {timedelta(seconds=1)}
    # Skipped by the window, and only by it (a run may also be skipped for its lease, held by
    # the slot before it on a loaded machine: that is overlap skip, not the calendar).
    frozen = [slot for slot, _, error in second_slots if error == "blackout: freeze"]
    assert frozen == [starts + timedelta(seconds=s) for s in range(4)]
    assert all(status == RunStatus.SKIPPED for slot, status, _ in second_slots if slot in frozen)
    wait_for(
        lambda: (
            not JobRun.objects.filter(
                job=every_second, scheduled_for__lt=starts, status=RunStatus.SCHEDULED
            ).exists()
        ),
        timeout=30,
        what="the slots before the window ran",
    )
    ran = {line.split()[1] for line in log.read_text().splitlines()}
    assert not any(slot.astimezone(UTC).isoformat() in ran for slot in frozen)
