"""Names that print alike are refused (issue 41): no invisible or format character in a job's, a
blackout window's or an API token's name, on every way in (admin, CLI, API's services, ``@job``,
adoption); a name whose confusable skeleton (UTS #39) another of its kind has is refused naming
that one, by the database too (two look-alikes saved at once); and migration 0035 renames,
never drops, the rows that broke this before, with an audit entry."""

from __future__ import annotations

import io
import threading
import unicodedata
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from django.core.exceptions import ValidationError
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import IntegrityError, connection, transaction
from django.db.migrations.executor import MigrationExecutor
from django.test import Client
from django.urls import reverse
from django_celery_beat.models import IntervalSchedule, PeriodicTask

from jobs import registry, services
from jobs.audit import Actor
from jobs.beat import adoption, declared_jobs
from jobs.context import JobContext
from jobs.exceptions import NameReadsLikeAnother, RegistryConflict
from jobs.models import ApiToken, AuditEntry, Blackout, ConfigurationProblem, Job
from jobs.services import JobDefinition
from jobs.values import names
from jobs.values.names import job_name_for, skeleton, stored_skeleton
from jobs.web import tokens
from tests.support.forms import job_form_data
from tests.support.job_factory import HOURLY, new_job
from tests.support.migrations import migrated_back_to

TESTS = Actor.code("tests")
# The issue's nine rows, all reading "demo.quick": Cyrillic U+0456 and U+0435, then one
# invisible character each.
INVISIBLE = ["\u200b", "\u200d", "\ufeff", "\u034f", "\u2060", "\u202e"]
LOOK_ALIKES = ["demo.qu\u0456ck", "d\u0435mo.quick"]
HIDDEN = [f"demo.{c}quick" for c in INVISIBLE]
BEFORE = ("jobs", "0034_incidents_follow_their_cause")
NO_LOG = {"log": "/dev/null"}


def _job(name: str) -> Job:
    definition = JobDefinition(name, "tests.record", HOURLY, kwargs={"log": "/dev/null"})
    return services.create_job(definition, actor=TESTS)


def _window(name: str) -> Blackout:
    return services.add_blackout(
        name, datetime(2030, 1, 1, tzinfo=UTC), datetime(2030, 1, 2, tzinfo=UTC), actor=TESTS
    )


def _token(name: str) -> ApiToken:
    return tokens.create(name, actor=TESTS)[0]


def _name_error(make: Callable[[str], Any], name: str) -> str:
    with pytest.raises(ValidationError) as info:
        make(name)
    return " ".join(info.value.message_dict["name"])


# --- invisible and format characters ---------------------------------------------------------


@pytest.mark.django_db
@pytest.mark.parametrize("name", HIDDEN, ids=[f"U+{ord(c):04X}" for c in INVISIBLE])
@pytest.mark.parametrize("make", [_job, _window, _token], ids=["job", "window", "token"])
def test_a_name_with_an_invisible_character_is_refused(
    make: Callable[[str], Any], name: str
) -> None:
    assert "invisible or format character" in _name_error(make, name)
    assert not Job.objects.exists() and not Blackout.objects.exists()
    assert not ApiToken.objects.exists()
    assert names.job_name_problems(name)


@pytest.mark.django_db
def test_the_cli_and_the_admin_refuse_it_too(admin_client: Any) -> None:
    with pytest.raises(CommandError, match="invisible or format character"):
        call_command(
            "jobs", "add", HIDDEN[0], "--task", "tests.record", "--every", "1h",
            stdout=io.StringIO(), stderr=io.StringIO(),
        )  # fmt: skip
    response = admin_client.post(reverse("admin:jobs_job_add"), job_form_data(name=HIDDEN[-1]))
    assert response.status_code == 200
    errors = response.context["adminform"].form.errors["name"]
    assert "invisible or format character" in " ".join(errors)
    assert not Job.objects.exists()


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("table", "constraint"),
    [
        ("jobs_job", "job_name_visible"),
        ("jobs_blackout", "blackout_name_visible"),
        ("jobs_apitoken", "token_name_visible"),
    ],
)
def test_a_row_written_around_the_services_with_one_is_refused(table: str, constraint: str) -> None:
    new_job("demo.quick", kwargs=NO_LOG)
    _window("demo.quick")
    _token("demo.quick")
    with (
        pytest.raises(IntegrityError, match=constraint),
        transaction.atomic(),
        connection.cursor() as cursor,
    ):
        cursor.execute(f"UPDATE {table} SET name = %s", [HIDDEN[0]])


@pytest.mark.django_db
def test_postgresql_reads_the_invisible_rule_as_python_does() -> None:
    samples = [chr(c) for c in range(0x20, 0x3200) if not 0xD800 <= c < 0xE000]
    samples += ["\U000110bd", "\U0001bca0", "\U0001d173", "\U000e0001", "\U000e0fff", "\U000f0000"]
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT s ~ %s FROM unnest(%s::text[]) WITH ORDINALITY AS t(s, i) ORDER BY i",
            [names.HOLDS_INVISIBLE_CHARACTER, samples],
        )
        in_postgresql = [row[0] for row in cursor.fetchall()]
    assert in_postgresql == [bool(names.invisible_characters(s)) for s in samples]


# --- names that read like another ------------------------------------------------------------


def test_the_skeleton_is_unicodes_for_the_issues_names() -> None:
    assert {skeleton(name) for name in ["demo.quick", *LOOK_ALIKES, *HIDDEN]} == {
        skeleton("demo.quick")
    }
    assert skeleton("paypal") == skeleton("\u0440\u0430\u0443\u0440\u0430l")  # Cyrillic er, a, u
    assert skeleton("demo.quick") != skeleton("demo.quack")
    assert skeleton("Report") != skeleton("report")  # case shows


@pytest.mark.django_db
@pytest.mark.parametrize("name", LOOK_ALIKES)
@pytest.mark.parametrize("make", [_job, _window, _token], ids=["job", "window", "token"])
def test_a_look_alike_of_an_existing_name_is_refused_naming_it(
    make: Callable[[str], Any], name: str
) -> None:
    make("demo.quick")
    message = _name_error(make, name)
    assert f"{name!r} reads like the " in message and "'demo.quick'" in message


@pytest.mark.django_db
def test_the_api_answers_400_naming_the_window_it_reads_like() -> None:
    secret = tokens.create("api", actor=TESTS)[1]
    api = Client(headers={"authorization": f"Bearer {secret}"})
    window = {"starts_at": "2030-01-01T00:00:00Z", "ends_at": "2030-01-02T00:00:00Z"}
    posted = [
        api.post("/api/blackouts", {**window, "name": name}, content_type="application/json")
        for name in ["freeze", "fr\u0435eze", "fr\u200beeze"]
    ]
    assert [response.status_code for response in posted] == [201, 400, 400]
    assert "reads like the blackout window 'freeze'" in posted[1].json()["fields"]["name"][0]
    assert "invisible or format character" in posted[2].json()["fields"]["name"][0]
    assert list(Blackout.objects.values_list("name", flat=True)) == ["freeze"]


@pytest.mark.django_db
def test_a_rename_to_a_look_alike_is_refused_in_the_admin(admin_client: Any) -> None:
    new_job("demo.quick", kwargs=NO_LOG)
    other = new_job("other", kwargs=NO_LOG)
    url = reverse("admin:jobs_job_change", args=[other.pk])
    response = admin_client.post(url, job_form_data(name=LOOK_ALIKES[0]))
    assert response.status_code == 200
    assert "reads like the job 'demo.quick'" in " ".join(
        response.context["adminform"].form.errors["name"]
    )
    assert Job.objects.get(pk=other.pk).name == "other"


@pytest.mark.django_db
def test_a_name_whose_skeleton_outgrows_an_index_entry_is_kept_and_compared_by_digest() -> None:
    # U+FDFA's skeleton is 30 bytes: 100 of them, 3,000, more than a B-tree entry holds.
    _window("\ufdfa" * 100)
    long = _window("\ufdfa" * 40)
    assert long.name_skeleton.startswith("sha256:")
    # The same skeleton, spelled otherwise (one U+FDFA decomposed), is refused naming the first.
    spelled = unicodedata.normalize("NFKD", "\ufdfa") + "\ufdfa" * 39
    assert f"reads like the blackout window {long.name!r}" in _name_error(_window, spelled)


@pytest.mark.django_db
def test_the_database_refuses_the_second_of_two_look_alikes_naming_the_first() -> None:
    # What two creations that each passed validation before the other saved come to.
    new_job("demo.quick", kwargs=NO_LOG)
    late = Job(name=LOOK_ALIKES[0], task="tests.record", kind="continuous")
    with pytest.raises(NameReadsLikeAnother, match=r"reads like the job 'demo\.quick'") as info:
        late.save()
    assert info.value.message_dict["name"]
    assert list(Job.objects.values_list("name", flat=True)) == ["demo.quick"]


@pytest.mark.django_db(transaction=True)
def test_two_look_alikes_created_at_once_one_wins() -> None:
    barrier, outcomes = threading.Barrier(2), {}

    def create(name: str) -> None:
        try:
            barrier.wait(timeout=10)
            _job(name)
            outcomes[name] = "created"
        except ValidationError as exc:
            outcomes[name] = " ".join(exc.messages)
        finally:
            connection.close()

    threads = [threading.Thread(target=create, args=(n,)) for n in ["demo.quick", LOOK_ALIKES[0]]]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    [winner] = Job.objects.values_list("name", flat=True)
    loser = next(name for name in outcomes if name != winner)
    assert outcomes[winner] == "created"
    assert f"reads like the job {winner!r}" in outcomes[loser]


# --- names that come from code and from Celery's configuration -----------------------------


@pytest.fixture
def declare(monkeypatch: pytest.MonkeyPatch) -> Callable[..., None]:
    """``@job(name, **options)`` in a registry of this test's own (test_declared_jobs's)."""
    monkeypatch.setattr(registry, "_REGISTRY", {})
    monkeypatch.setattr(registry, "_register_celery_task", lambda name: None)

    def declare_job(name: str, **options: Any) -> None:
        def report(ctx: JobContext) -> None:
            """A declared job."""

        registry.job(name, **options)(report)

    return declare_job


def test_job_refuses_an_invisible_character_or_a_look_alike_declaration(
    declare: Callable[..., None],
) -> None:
    with pytest.raises(TypeError, match="invisible or format character"):
        declare(HIDDEN[0], every="1h")
    with pytest.raises(TypeError, match="invisible or format character"):
        declare(HIDDEN[1])  # a job function's name alone
    declare("demo.quick", every="1h")
    with pytest.raises(RegistryConflict, match=r"reads like the declared job 'demo\.quick'"):
        declare(LOOK_ALIKES[0], every="1h")


@pytest.mark.django_db
def test_a_declared_look_alike_of_an_operators_job_is_shown_not_created(
    declare: Callable[..., None],
) -> None:
    Job.objects.create(name="demo.quick", task="tests.record", kind="continuous")
    declare(LOOK_ALIKES[0], every="1h")
    declare("report", every="1h")
    assert declared_jobs.sync_declared_jobs() == ["report"]  # the others still synced
    problem = ConfigurationProblem.objects.get()
    assert "reads like the job 'demo.quick'" in problem.message
    assert set(Job.objects.values_list("name", flat=True)) == {"demo.quick", "report"}


@pytest.mark.django_db
def test_an_adopted_entry_reading_like_a_job_is_refused_with_the_reason() -> None:
    new_job("demo.quick", kwargs=NO_LOG)
    every = IntervalSchedule.objects.create(every=1, period="hours")
    PeriodicTask.objects.create(
        name=LOOK_ALIKES[1], task="tests.record", interval=every, kwargs='{"log": "-"}'
    )
    hidden = PeriodicTask.objects.create(
        name=HIDDEN[5], task="tests.record", interval=every, kwargs='{"log": "-"}'
    )
    verdicts = {verdict.name: verdict for verdict in adoption.adopt()}
    refused = verdicts[LOOK_ALIKES[1]]
    assert not refused.adoptable and "reads like the job 'demo.quick'" in refused.reason
    # An invisible character in a key is written out: a job, named so it reads as it is.
    assert verdicts[HIDDEN[5]].adoptable
    assert Job.objects.get(periodic_task=hidden).name == "demo.[U+202E]quick"
    assert job_name_for(HIDDEN[5]) == "demo.[U+202E]quick"


# --- migration 0035 ---------------------------------------------------------------------------


@pytest.fixture
def before_0035(transactional_db: None) -> Iterator[MigrationExecutor]:
    """The database as migration 0035 finds it (see BEFORE)."""
    with migrated_back_to(BEFORE) as executor:
        yield executor


def test_migration_0035_renames_the_rows_that_read_alike_and_keeps_them(
    before_0035: MigrationExecutor,
) -> None:
    apps = before_0035.loader.project_state([BEFORE]).apps
    OldJob = apps.get_model("jobs", "Job")
    OldPeriodicTask = apps.get_model("django_celery_beat", "PeriodicTask")
    OldInterval = apps.get_model("django_celery_beat", "IntervalSchedule")
    OldBlackout = apps.get_model("jobs", "Blackout")
    every = OldInterval.objects.create(every=1, period="hours")
    # The spoofs first: the plain name keeps its name however much later it came.
    made = [
        OldJob.objects.create(name=n, task="tests.record", kind="continuous")
        for n in [*LOOK_ALIKES, *HIDDEN]
    ]
    entry = OldPeriodicTask.objects.create(
        name="job:demo.quick", task="tests.record", interval=every, kwargs='{"job": "demo.quick"}'
    )
    plain = OldJob.objects.create(name="demo.quick", task="tests.record", periodic_task=entry)
    spoof_entry = OldPeriodicTask.objects.create(
        name=f"job:{HIDDEN[0]}", task="tests.record", interval=every
    )
    OldJob.objects.filter(pk=made[2].pk).update(kind="periodic", periodic_task=spoof_entry)
    for name in ["freeze", "fr\u0435eze"]:
        OldBlackout.objects.create(
            name=name, starts_at="2030-01-01T00:00Z", ends_at="2030-01-02T00:00Z"
        )

    before_0035.loader.build_graph()
    before_0035.migrate(before_0035.loader.graph.leaf_nodes())

    jobs = {job.pk: job for job in Job.objects.select_related("periodic_task")}
    assert len(jobs) == 9  # none dropped
    assert jobs[plain.pk].name == "demo.quick"
    assert jobs[made[0].pk].name == f"demo.qu\u0456ck~{made[0].pk}"
    assert jobs[made[1].pk].name == f"d\u0435mo.quick~{made[1].pk}"
    assert [jobs[m.pk].name for m in made[2:]] == [f"demo.[U+{ord(c):04X}]quick" for c in INVISIBLE]
    assert len({job.name_skeleton for job in jobs.values()}) == 9
    assert all(job.name_skeleton == stored_skeleton(job.name) for job in jobs.values())
    entry_names = PeriodicTask.objects.filter(pk__in=[entry.pk, spoof_entry.pk])
    assert set(entry_names.values_list("name", flat=True)) == {
        "job:demo.quick",
        "job:demo.[U+200B]quick",
    }
    audit = AuditEntry.objects.filter(actor="code:migration 0035", job__isnull=False)
    assert {(a.job_id, str(a.before), str(a.after)) for a in audit} == {
        (m.pk, str({"name": m.name}), str({"name": jobs[m.pk].name})) for m in made
    }
    windows = Blackout.objects.order_by("pk")
    assert [w.name for w in windows] == ["freeze", f"fr\u0435eze~{windows[1].pk}"]
    # The rules hold from now on: a look-alike of a kept name is refused.
    with pytest.raises(NameReadsLikeAnother):
        Job(name="dem\u043e.quick", task="tests.record", kind="continuous").save()
