"""How ``make test`` splits the suite over processes, and what keeps them apart."""

from __future__ import annotations

import pytest

from devtools.side_by_side import pytest_options
from tests.side_by_side import broker_url_of_worker

PLUGIN = ["-p", "tests.side_by_side"]


def test_each_worker_gets_a_redis_database_of_its_own_after_the_suites() -> None:
    urls = {broker_url_of_worker("redis://127.0.0.1:6379/1", f"gw{n}") for n in range(3)}
    assert urls == {f"redis://127.0.0.1:6379/{db}" for db in (2, 3, 4)}
    # Counted on around the end; a password and a missing database are kept as they mean.
    assert broker_url_of_worker("redis://:s3cret@h:6379/15", "gw0") == "redis://:s3cret@h:6379/0"
    assert broker_url_of_worker("redis://h:6379", "gw1") == "redis://h:6379/2"


def test_other_brokers_stay_shared_and_too_many_workers_are_refused() -> None:
    amqp = "amqp://guest:guest@127.0.0.1:5672//"
    assert broker_url_of_worker(amqp, "gw3") == amqp
    with pytest.raises(ValueError, match="gw15"):
        broker_url_of_worker("redis://h/0", "gw15")


@pytest.mark.parametrize(
    ("args", "environ", "expected"),
    [
        ([], {}, [*PLUGIN, "-n", "3", "--dist", "loadgroup"]),
        (
            ["tests/unit", "-q"],
            {"JOBS_TEST_PROCESSES": "4"},
            [*PLUGIN, "-n", "4", "--dist", "loadgroup"],
        ),
        ([], {"JOBS_TEST_PROCESSES": "1"}, PLUGIN),
        (["-n", "0"], {}, PLUGIN),
        (["-n2"], {}, PLUGIN),
        (["--numprocesses=auto"], {}, PLUGIN),
        (["--dist", "load"], {}, PLUGIN),
        (["--durations=5"], {}, [*PLUGIN, "-n", "3", "--dist", "loadgroup"]),
        (["-p", "no:xdist"], {}, []),
    ],
)
def test_the_callers_own_choice_of_processes_wins(
    args: list[str], environ: dict[str, str], expected: list[str]
) -> None:
    assert pytest_options(args, environ) == expected
