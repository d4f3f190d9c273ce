"""What runs next, against real PostgreSQL: ``jobs upcoming`` (and ``jobs.beat.slot_fates``)
lists exactly the slots the beats then fire, each with its fate, over a DST change and a blackout
window, the beat driven over a simulated clock; the slots that run are Celery's own schedule's;
a backfill's dry run makes nothing and lists the slots the real one then makes; bad input is one
line naming the flag."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest
import redis
from celery.schedules import crontab, schedule
from django.core.management.base import CommandError
from django.test import Client

from jobs import services
from jobs.audit import Actor
from jobs.beat import slot_fates
from jobs.beat.scheduler import ClusterScheduler
from jobs.beat.slot_fates import Outcome
from jobs.database.database_clock import database_now
from jobs.models import Job, JobRun, RunStatus
from jobs.schedule.kinds import Cron, Every
from project.celery import app
from tests.support.cli_jobs import jobs, jobs_error
from tests.support.virtual_clock import VirtualClock

pytestmark = pytest.mark.django_db(transaction=True)

QUEUE = "tests-slot-fates"
ACTOR = Actor.code("tests")
PARIS = "Europe/Paris"
# Friday 2027-03-26 to Wednesday 2027-03-31: Sunday 2027-03-28 is the spring-forward day in
# Paris (02:00 CET becomes 03:00 CEST, at 01:00 UTC), when 02:30 does not exist.
START = datetime(2027, 3, 26, 0, 0, tzinfo=UTC)
END = datetime(2027, 3, 31, 6, 0, tzinfo=UTC)


def _drive_beat(until: datetime, step: timedelta = timedelta(minutes=10)) -> None:
    """A beat over a simulated clock: at each instant it ticks until nothing more is due (as
    celery beat does when a tick answers "sleep 0"), then the clock moves on."""
    clock = VirtualClock(START)
    beat = ClusterScheduler(app=app, clock=clock, maintain=False)
    while clock.now <= until:
        while beat.tick_at(clock.now) == 0:
            pass
        clock.now += step


def _records(job: Job) -> list[tuple[datetime, str, str]]:
    return list(
        JobRun.objects.filter(job=job)
        .order_by("scheduled_for")
        .values_list("scheduled_for", "status", "error")
    )


def test_upcoming_lists_exactly_the_slots_the_beats_then_fire_over_a_dst_change(
    make_job: Callable[..., Job], redis_broker: redis.Redis
) -> None:
    job = make_job(
        "nightly",
        schedule=Cron(expr="30 2 * * *", tz=PARIS),
        queue=QUEUE,
        start_deadline=3600,
        # Active from the simulated start (the slots between today and then are not owed) to
        # Tuesday noon: Wednesday's slot gets no run.
        active_from=START,
        active_until=datetime(2027, 3, 30, 12, 0, tzinfo=UTC),
    )
    services.add_blackout(
        "quarter-close",
        datetime(2027, 3, 29, 0, 0, tzinfo=UTC),
        datetime(2027, 3, 29, 6, 0, tzinfo=UTC),
        actor=ACTOR,
        job_name="nightly",
    )
    listed = json.loads(jobs("upcoming", "nightly", "--since", START.isoformat(), "--json"))
    text = jobs("upcoming", "nightly", "--since", START.isoformat(), "--count", "6")

    _drive_beat(END)

    results = [entry for entry in listed["results"] if entry["slot"] <= END.isoformat()]
    expected = [
        (
            datetime.fromisoformat(entry["slot"]),
            RunStatus.SCHEDULED if entry["fate"] == "runs" else RunStatus.SKIPPED,
            entry["reason"] or "",
        )
        for entry in results
        if entry["fate"] != "not scheduled"
    ]
    assert _records(job) == expected
    assert [(entry["slot"], entry["fate"]) for entry in results] == [
        ("2027-03-26T01:30:00+00:00", "runs"),
        ("2027-03-27T01:30:00+00:00", "runs"),
        ("2027-03-28T01:00:00+00:00", "runs"),  # 02:30 does not exist: 03:00 CEST
        ("2027-03-29T00:30:00+00:00", "skipped"),
        ("2027-03-30T00:30:00+00:00", "runs"),
        ("2027-03-31T00:30:00+00:00", "not scheduled"),
    ]
    spring = results[2]
    assert spring["local"] == "2027-03-28T03:00:00+02:00"
    assert spring["dst"] == [
        "spring forward in Europe/Paris on 2027-03-28: 02:00 CET becomes 03:00 CEST "
        "(01:00 UTC); 02:30 does not exist that day: it runs at 03:00 CEST (01:00 UTC), the "
        "end of the gap"
    ]
    assert results[3]["blackout"] == "quarter-close"
    assert results[3]["reason"] == "blackout: quarter-close"
    assert results[5]["reason"].startswith("inactive: after the job's active_until")
    # The text names them too.
    assert "spring forward in Europe/Paris on 2027-03-28" in text
    assert "02:30 does not exist that day" in text
    assert "blackout: quarter-close" in text
    assert redis_broker.llen(QUEUE) == 4  # the slots that run were published


def test_a_repeated_hour_runs_once_at_its_first_pass_and_is_named(
    make_job: Callable[..., Job],
) -> None:
    job = make_job("autumn", schedule=Cron(expr="30 2 * * *", tz=PARIS))
    fates = slot_fates.upcoming(job, since=datetime(2027, 10, 30, 12, 0, tzinfo=UTC), count=2)
    assert [fate.slot for fate in fates] == [
        datetime(2027, 10, 31, 0, 30, tzinfo=UTC),  # 02:30 CEST, the first pass
        datetime(2027, 11, 1, 1, 30, tzinfo=UTC),  # 02:30 CET
    ]
    assert fates[0].dst == (
        "02:30 comes twice on 2027-10-31 in Europe/Paris: CEST (00:30 UTC), then CET "
        "(01:30 UTC); it runs once, at the first",
    )
    assert fates[1].dst == (
        "fall back in Europe/Paris on 2027-10-31: 03:00 CEST becomes 02:00 CET (01:00 UTC)",
    )


def test_the_slots_that_run_are_celery_s_own_schedule_s(make_job: Callable[..., Job]) -> None:
    since = datetime(2027, 1, 4, 7, 3, tzinfo=UTC)
    cron = make_job("weekdays", schedule=Cron(expr="*/20 9-10 * * mon-fri", tz="UTC"))
    fates = slot_fates.upcoming(cron, since=since, count=30)
    assert {fate.outcome for fate in fates} == {Outcome.RUNS}
    oracle = crontab(minute="*/20", hour="9-10", day_of_week="mon-fri")
    expected, current = [], since
    for _ in range(30):
        last, delta, _ = oracle.remaining_delta(current, tz=UTC)
        current = last + delta
        expected.append(current)
    assert [fate.slot for fate in fates] == expected

    every = make_job("quarterly", schedule=Every(900))
    fates = slot_fates.upcoming(every, since=since, count=20)
    expected = [fates[0].slot]
    for _ in range(19):
        last = expected[-1]
        # Celery's next run of an interval entry that last ran at ``last``, asked then.
        interval = schedule(run_every=timedelta(minutes=15), nowfun=_at(last))
        expected.append(last + interval.remaining_estimate(last))
    assert [fate.slot for fate in fates] == expected


def _at(instant: datetime) -> Callable[[], datetime]:
    return lambda: instant


def test_calendars_and_pauses_are_fates_too(make_job: Callable[..., Job]) -> None:
    job = make_job(
        "payroll",
        schedule=Cron(expr="0 9 * * *", tz="America/New_York"),
        business_days_only=True,
        holiday_calendar="US",
    )
    fates = slot_fates.upcoming(job, since=datetime(2025, 12, 24, tzinfo=UTC), count=5)
    assert [(fate.outcome, fate.reason) for fate in fates] == [
        (Outcome.RUNS, ""),
        (Outcome.SKIPPED, "holiday: Christmas Day on 2025-12-25 (US)"),
        (Outcome.RUNS, ""),
        (Outcome.SKIPPED, "weekend: Saturday 2025-12-27 (America/New_York) is not a business day"),
        (Outcome.SKIPPED, "weekend: Sunday 2025-12-28 (America/New_York) is not a business day"),
    ]
    # Paused until Tuesday 2027-01-05's slot (09:00 EST): it gets no run; Wednesday's runs.
    until = datetime(2027, 1, 5, 14, 0, tzinfo=UTC)
    paused = services.pause("payroll", until=until.isoformat(), actor=ACTOR)
    fates = slot_fates.upcoming(paused, since=datetime(2027, 1, 4, tzinfo=UTC), count=3)
    assert [fate.outcome for fate in fates] == [Outcome.NOT_SCHEDULED] * 2 + [Outcome.RUNS]
    assert fates[0].reason == f"paused: until {until.isoformat()}"


def test_a_backfill_dry_run_makes_nothing_and_lists_what_the_real_one_makes(
    make_job: Callable[..., Job],
) -> None:
    since = datetime(2025, 12, 24, 0, 0, tzinfo=UTC)
    until = datetime(2025, 12, 27, 23, 59, tzinfo=UTC)
    job = make_job("fill", schedule=Every(6 * 3600), business_days_only=True)
    services.add_blackout(
        "freeze", since + timedelta(hours=6), since + timedelta(hours=7), actor=ACTOR
    )
    dry = json.loads(
        jobs(
            "backfill",
            "fill",
            "--since",
            since.isoformat(),
            "--until",
            until.isoformat(),
            "--dry-run",
            "--json",
        )
    )
    text = jobs(
        "backfill", "fill", "--since", since.isoformat(), "--until", until.isoformat(), "--dry-run"
    )
    assert not JobRun.objects.filter(job=job).exists()
    assert "blackout: freeze" in text and "weekend: Saturday" in text
    services.backfill_job("fill", since, until, actor=ACTOR)
    made = [
        (slot.isoformat(), "skipped" if status == RunStatus.SKIPPED else "runs", error or None)
        for slot, status, error in _records(job)
    ]
    assert [(s["slot"], s["fate"], s["reason"]) for s in dry["slots"]] == made
    assert len(made) == 16 and dry["missing"] == 16
    assert made[1] == ("2025-12-24T06:00:00+00:00", "skipped", "blackout: freeze")


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (["--count", "0"], "jobs upcoming: error: --count: '0': must be at least 1"),
        (["--count", "1001"], "jobs upcoming: error: --count: '1001': must be at most 1,000"),
        (["--count", "many"], "jobs upcoming: error: --count: 'many' is not a whole number"),
        (["--since", "tomorrow"], "jobs upcoming: error: --since: "),
        (["--since", "0001-01-01T00:00:00Z"], "jobs upcoming: error: --since: Must not be before"),
    ],
)
def test_bad_input_is_one_line_naming_the_flag(
    make_job: Callable[..., Job], args: list[str], line: str
) -> None:
    make_job("nightly")
    error = jobs_error("upcoming", "nightly", *args)
    assert str(error).startswith(line), str(error)
    assert "\n" not in str(error)
    assert isinstance(error, CommandError) and error.returncode == 2


@pytest.mark.parametrize("name", ["gh\x00ost", "gh\udcffost"])
def test_a_name_that_cannot_be_stored_is_a_usage_error(name: str) -> None:
    error = jobs_error("upcoming", name)
    assert str(error).startswith("jobs upcoming: error: NAME: "), str(error)
    assert error.returncode == 2


def test_an_unknown_job_is_one_line(db: None) -> None:
    error = jobs_error("upcoming", "ghost")
    assert str(error) == "jobs upcoming: error: no job named 'ghost'"
    assert error.returncode == 1  # as every verb answers a job that does not exist


def test_a_continuous_job_has_no_slots(make_job: Callable[..., Job]) -> None:
    make_job("poller", schedule=None)
    error = jobs_error("upcoming", "poller")
    assert "continuous job" in str(error)


# --- the API --------------------------------------------------------------------------------


def test_the_api_lists_the_slots_and_their_fates(
    make_job: Callable[..., Job], insider: Client
) -> None:
    make_job("nightly", schedule=Cron(expr="30 2 * * *", tz=PARIS))
    services.add_blackout(
        "quarter-close",
        datetime(2027, 3, 29, 0, 0, tzinfo=UTC),
        datetime(2027, 3, 29, 6, 0, tzinfo=UTC),
        actor=ACTOR,
    )
    response = insider.get(
        "/api/jobs/nightly/upcoming", {"since": "2027-03-27T12:00:00Z", "count": "2"}
    )
    assert response.status_code == 200, response.content
    assert response.json() == {
        "job": "nightly",
        "schedule": "At 02:30 AM (Europe/Paris)",
        "since": "2027-03-27T12:00:00Z",
        "results": [
            {
                "slot": "2027-03-28T01:00:00Z",
                "local": "2027-03-28T03:00:00+02:00",
                "zone": PARIS,
                "fate": "runs",
                "reason": None,
                "blackout": None,
                "dst": [
                    "spring forward in Europe/Paris on 2027-03-28: 02:00 CET becomes 03:00 CEST "
                    "(01:00 UTC); 02:30 does not exist that day: it runs at 03:00 CEST "
                    "(01:00 UTC), the end of the gap"
                ],
            },
            {
                "slot": "2027-03-29T00:30:00Z",
                "local": "2027-03-29T02:30:00+02:00",
                "zone": PARIS,
                "fate": "skipped",
                "reason": "blackout: quarter-close",
                "blackout": "quarter-close",
                "dst": [],
            },
        ],
    }
    # Without since: from now on, ten slots.
    assert len(insider.get("/api/jobs/nightly/upcoming").json()["results"]) == 10


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ({"count": "0"}, "count"),
        ({"count": "1001"}, "count"),
        ({"count": "ten"}, "count"),
        ({"since": "yesterday"}, "since"),
        ({"since": "0001-01-01T00:00:00Z"}, "since"),
        ({"since": "2027-01-01T00:00:00Z\x00"}, "since"),
        ({"until": "2027-01-01"}, "until"),
    ],
)
def test_the_api_answers_bad_parameters_400_naming_them(
    make_job: Callable[..., Job], insider: Client, query: dict[str, str], field: str
) -> None:
    make_job("nightly")
    response = insider.get("/api/jobs/nightly/upcoming", query)
    assert response.status_code == 400, response.content
    assert list(response.json()["fields"]) == [field]


def test_the_api_answers_a_name_that_cannot_be_stored_400(insider: Client) -> None:
    # A lone surrogate cannot reach a path (Django keeps invalid UTF-8 percent-escaped): NUL can.
    response = insider.get("/api/jobs/gh%00ost/upcoming")
    assert response.status_code == 400, response.content
    assert list(response.json()["fields"]) == ["name"]


def test_the_api_answers_an_unknown_job_404_and_a_continuous_one_409(
    make_job: Callable[..., Job], insider: Client
) -> None:
    assert insider.get("/api/jobs/ghost/upcoming").status_code == 404
    make_job("poller", schedule=None)
    response = insider.get("/api/jobs/poller/upcoming")
    assert response.status_code == 409
    assert "continuous job" in response.json()["error"]


def test_the_end_of_time_ends_the_list(make_job: Callable[..., Job], insider: Client) -> None:
    make_job("hourly", schedule=Every(3600))
    late = {"since": "9998-12-31T22:00:00Z", "count": "5"}
    assert len(insider.get("/api/jobs/hourly/upcoming", late).json()["results"]) == 2
    response = insider.get("/api/jobs/hourly/upcoming", {"since": "9999-12-31T22:00:00Z"})
    assert response.status_code == 400
    assert list(response.json()["fields"]) == ["since"]


# --- the admin ------------------------------------------------------------------------------


def test_the_job_page_lists_the_next_slots_and_their_fates(
    make_job: Callable[..., Job], admin_client: Client
) -> None:
    job = make_job("hourly", schedule=Every(3600))
    now = database_now()
    services.add_blackout("freeze", now + timedelta(hours=2), now + timedelta(hours=3), actor=ACTOR)
    page = admin_client.get(f"/admin/jobs/job/{job.pk}/change/")
    assert page.status_code == 200
    html = page.text
    assert "Next slots and their fates" in html
    assert html.count('<tr class="fate-') == 10
    assert html.count('<tr class="fate-skipped">') == 1 and "blackout: freeze" in html
    poller = make_job("poller", schedule=None)
    assert (
        "a continuous job has no slots"
        in admin_client.get(f"/admin/jobs/job/{poller.pk}/change/").text
    )


def test_slots_within_a_minute_read_apart(make_job: Callable[..., Job]) -> None:
    """An interval of 20 s: each slot's words carry its seconds (the job page once printed
    three slots of a minute alike); whole minutes stay without them."""
    since = datetime(2027, 1, 4, 7, 0, 5, tzinfo=UTC)
    every = make_job("often", schedule=Every(20, anchor=datetime(2027, 1, 4, tzinfo=UTC)))
    fates = slot_fates.upcoming(every, since=since, count=3)
    assert [fate.utc_words for fate in fates] == [
        "2027-01-04 07:00:20", "2027-01-04 07:00:40", "2027-01-04 07:01",
    ]  # fmt: skip
    assert len({fate.local_words for fate in fates}) == 3


def test_the_admin_backfill_page_lists_the_slots_before_its_confirm_button(
    make_job: Callable[..., Job], admin_client: Client
) -> None:
    job = make_job("fill", schedule=Every(6 * 3600), business_days_only=True)
    page = f"/admin/jobs/job/{job.pk}/backfill/"
    form = {"since": "2025-12-26 00:00:00", "until": "2025-12-27 23:59:00", "max_runs": "100"}
    dry = admin_client.post(page, {**form, "dry_run": "on"})
    assert dry.status_code == 200 and not JobRun.objects.exists()
    html = dry.text
    assert html.count('<tr class="fate-runs">') == 4  # Friday
    assert html.count('<tr class="fate-skipped">') == 4  # Saturday
    assert "weekend: Saturday 2025-12-27" in html
    assert html.index("slot-fates") < html.index('value="Make these runs"')
    assert 'name="dry_run"' in html and 'name="dry_run" checked' not in html
    made = admin_client.post(page, form, follow=True)
    assert "Made 8 backfill run(s)" in made.text
    assert JobRun.objects.filter(job=job, status=RunStatus.SKIPPED).count() == 4


def test_a_long_backfill_preview_is_cut_on_the_admin_page(
    make_job: Callable[..., Job], admin_client: Client
) -> None:
    job = make_job("fill", schedule=Every(60))
    form = {"since": "2025-12-26 00:00:00", "until": "2025-12-26 23:59:00", "max_runs": "2000"}
    dry = admin_client.post(f"/admin/jobs/job/{job.pk}/backfill/", {**form, "dry_run": "on"})
    assert dry.text.count('<tr class="fate-runs">') == 1000
    assert "and 440 more slot(s)" in dry.text
