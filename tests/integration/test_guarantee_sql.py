"""The lease rules that carry guarantees 2 and 3 are written in ``jobs.guard.lease`` and repeated,
for speed, inside the guarded run's PL/pgSQL functions (migration 0008). This test reads the
functions as the database holds them now and fails when either copy drifts from the other."""

from __future__ import annotations

import re

import pytest
from django.db import connection

from jobs.guard import lease

pytestmark = pytest.mark.django_db

# The functions' names for what the Python statements pass as parameters.
PLPGSQL_PARAMETERS = {"%(min_hold)s": "p_min_hold"}


def _installed(function: str) -> str:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_get_functiondef(%s::regproc)", [function])
        definition: str = cursor.fetchone()[0]
    return definition


def _normalized(sql: str) -> str:
    for placeholder, parameter in PLPGSQL_PARAMETERS.items():
        sql = sql.replace(placeholder, parameter)
    sql = re.sub(r"\bl\.", "jobs_lease.", sql)  # the functions alias the lease table as l
    return " ".join(sql.lower().split())


@pytest.mark.parametrize(
    ("rule", "function"),
    [
        (lease.TAKE_OVER_IF_LAPSED_PG, "jobs_claim_run"),
        (lease.RELEASE_EXPIRY_PG, "jobs_finish_run"),
    ],
    ids=["take over only a lapsed lease, token + 1", "release honours min_hold"],
)
def test_the_plpgsql_copy_of_each_lease_rule_matches_the_python_one(
    rule: str, function: str
) -> None:
    assert _normalized(rule) in _normalized(_installed(function)), (
        f"{function} no longer applies the rule of jobs.lease; change both together "
        "(a new migration with CREATE OR REPLACE FUNCTION)"
    )
