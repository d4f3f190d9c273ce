"""What ``@job`` refuses before anything is registered."""

from __future__ import annotations

import pytest

from jobs import registry


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("reports/nightly", "A job name cannot contain '/'"),
        ("reports\nnightly", "A job name cannot contain a line break"),
        (" nightly", "A job name cannot be blank or begin or end with a space"),
        ("nightly\u3000", "A job name cannot be blank or begin or end with a space"),
    ],
)
def test_a_declared_job_name_the_job_could_not_have_is_refused_at_import(
    name: str, message: str
) -> None:
    with pytest.raises(TypeError, match=message):
        registry.job(name, every="1h")
    assert not registry.is_registered(name)


@pytest.mark.parametrize(
    ("lock_key", "message"),
    [
        # A placeholder that names no parameter (a parameter's default would fill it).
        ("city:{town}", r"its lock key cannot be derived from the arguments: KeyError\('town'\)"),
        ("x" * 300, "its lock key is 300 characters long with these arguments, at most 255"),
        (lambda region: region, "its lock key cannot be derived from the arguments: TypeError"),
    ],
)
def test_a_declared_job_whose_runs_cannot_derive_their_lock_key_is_refused_at_import(
    lock_key: str, message: str
) -> None:
    # The job it declares has no arguments, so every one of its runs would fail.
    with pytest.raises(TypeError, match=r"@job\('tests.keyed_declared'\): " + message):

        @registry.job("tests.keyed_declared", every="1h", lock_key=lock_key)
        def keyed(ctx: object, city: str = "Paris") -> None:
            """Never registered."""

    assert not registry.is_registered("tests.keyed_declared")


def test_the_lock_key_limit_is_the_lease_column() -> None:
    from jobs.models import JobRun, Lease

    assert Lease._meta.get_field("key").max_length == registry.LOCK_KEY_MAX_LENGTH
    assert JobRun._meta.get_field("lease_key").max_length == registry.LOCK_KEY_MAX_LENGTH


def test_a_lock_key_names_arguments_however_they_are_passed() -> None:
    def by_name(ctx: object, region: str, city: str = "Paris") -> None:
        """A job function (not registered: the spec is made here)."""

    spec = registry.JobSpec(name="tests.keyed_by_name", func=by_name, lock_key="{region}:{city}")
    assert spec.derive_lock_key(["eu"], {}) == "eu:Paris"
    assert spec.derive_lock_key([], {"region": "eu", "city": "Oslo"}) == "eu:Oslo"
    assert spec.derive_lock_key(["eu", "Lyon"], {}) == "eu:Lyon"


def test_a_jobs_log_level_is_one_of_loggings_names() -> None:
    with pytest.raises(TypeError, match=r"log_level='LOUD': not a log level: use one of DEBUG"):
        registry.job("tests.loud", log_level="LOUD")
    assert not registry.is_registered("tests.loud")
