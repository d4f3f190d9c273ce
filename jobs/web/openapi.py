"""The OpenAPI 3.0 description of ``jobs.web.api``, served at ``/api/openapi.json``.

Written by hand next to the views it describes; ``tests/integration/test_openapi.py`` checks
that every route is described and fuzzes every operation against it (schemathesis).
"""

from __future__ import annotations

from functools import cache
from typing import Any

from django.core.validators import MaxValueValidator, MinValueValidator
from django.db.models import FloatField, IntegerField

from jobs.beat.slot_fates import DEFAULT_COUNT as DEFAULT_UPCOMING
from jobs.beat.slot_fates import MAX_COUNT as MAX_UPCOMING
from jobs.beat.slot_fates import Outcome
from jobs.models import (
    JOB_ALERT_REASONS,
    MAX_PAUSE_REASON,
    AuditAction,
    AuditSource,
    CatchUp,
    Job,
    JobKind,
    OnLost,
    Overlap,
    RunStatus,
    Trigger,
    alert_channel_values,
)
from jobs.runlog.reading import DEFAULT_LIMIT as RUN_LOG_DEFAULT_LIMIT
from jobs.runlog.reading import MAX_LIMIT as RUN_LOG_MAX_LIMIT
from jobs.values import text
from jobs.values.serializers import RUN_FIELDS
from jobs.workflow.backfill import DEFAULT_MAX_RUNS as DEFAULT_BACKFILL_RUNS
from jobs.workflow.backfill import MAX_RUNS_LIMIT as MAX_BACKFILL_RUNS

IDEMPOTENCY_KEY_MAX = 200
MAX_LIMIT = 500
MAX_OFFSET = 100_000


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def _nullable(schema: dict[str, Any]) -> dict[str, Any]:
    return {**schema, "nullable": True}


def _error(description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": _ref("Error")}}}


def _json(description: str, schema: dict[str, Any]) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


_DATETIME = {"type": "string", "format": "date-time"}
_BACKFILL_FIELDS = [
    *("job", "since", "until", "dry_run", "missing", "on_record", "created"),
    *("first_slot", "last_slot", "slots"),
]
_ERRORS = {
    "401": _error("No credentials, or an unknown or revoked token."),
    "403": _error(
        "A staff session without the permission, a session write without CSRF, or a write "
        "with a read-only token."
    ),
    "503": _error(
        "The database is unreachable, or every connection of the web process's pool stayed busy "
        "past its timeout (DATABASE_POOL_TIMEOUT); Retry-After says when to try again."
    ),
}
_NOT_FOUND = {"404": _error("No job (or run) with that name (id).")}
# Every operation can answer 400: Django refuses a Host header outside DJANGO_ALLOWED_HOSTS.
_BAD = {"400": _error("A bad parameter, header (Host included) or body; `fields` names each.")}

_JOB_NAME = {
    "name": "name",
    "in": "path",
    "required": True,
    "description": "The job's name.",
    "schema": {"type": "string", "minLength": 1},
}


def _query(name: str, description: str, schema: dict[str, Any]) -> dict[str, Any]:
    return {
        "name": name,
        "in": "query",
        "required": False,
        "description": description,
        "schema": schema,
    }


_RUN_FILTERS = [
    _query("status", "Only runs in this state.", {"type": "string", "enum": RunStatus.values}),
    _query("trigger", "Only runs made this way.", {"type": "string", "enum": Trigger.values}),
    _query("node", "Only runs claimed by this node.", {"type": "string"}),
    _query("since", "Only slots at or after this instant.", _DATETIME),
    _query("until", "Only slots before this instant.", _DATETIME),
    _query(
        "limit",
        "At most this many runs (newest slot first).",
        {"type": "integer", "minimum": 1, "maximum": MAX_LIMIT, "default": 50},
    ),
    _query(
        "offset",
        "Skip this many runs; `next` in the answer gives the following page.",
        {"type": "integer", "minimum": 0, "maximum": MAX_OFFSET, "default": 0},
    ),
]

_LIMIT = _query(
    "limit",
    "At most this many (newest first).",
    {"type": "integer", "minimum": 1, "maximum": MAX_LIMIT, "default": 50},
)
_OFFSET = _query(
    "offset",
    "Skip this many; `next` in the answer gives the following page.",
    {"type": "integer", "minimum": 0, "maximum": MAX_OFFSET, "default": 0},
)

_PAUSE_PROPERTIES: dict[str, Any] = {
    "reason": _nullable(
        {
            "type": "string",
            "maxLength": MAX_PAUSE_REASON,
            "description": "Why, shown in the job list: one line (no control character).",
        }
    ),
    "until": _nullable(
        {
            "type": "string",
            "description": "When the beats resume it by themselves: an ISO 8601 time (UTC if no "
            "offset) or a duration from now such as `2h` or `1d12h`; it must be in the future. "
            "Omitted or null: until someone resumes it.",
            "example": "2h",
        }
    ),
}
_SELECTION_PROPERTIES: dict[str, Any] = {
    "queue": _nullable({"type": "string", "description": "Every job on this queue."}),
    "match": _nullable(
        {
            "type": "string",
            "description": "Every job whose name matches this shell pattern (`*`, `?`, `[...]`, "
            "case-sensitive), e.g. `billing.*`.",
        }
    ),
}
_MUTED_UNTIL = _nullable(
    {**_DATETIME, "description": "Alerts muted until then (null: not muted); incidents still open."}
)

_AFTER = {
    "type": "array",
    "items": {"type": "string", "minLength": 1},
    "uniqueItems": True,
    "description": "The jobs this one runs after: once per slot all of them succeeded for.",
}


def job_field_range(name: str) -> tuple[int, int]:
    """The whole numbers the ``Job`` field ``name`` takes: the bounds of its validators (its
    column's own included), so this document and the API's checks say what the model says."""
    field = Job._meta.get_field(name)
    assert isinstance(field, IntegerField)
    validators = field.validators
    low = max(v.limit_value for v in validators if isinstance(v, MinValueValidator))
    high = min(v.limit_value for v in validators if isinstance(v, MaxValueValidator))
    return low, high


def job_number_range(name: str) -> tuple[float, float]:
    """The numbers the ``Job`` field ``name`` (a float) takes: the bounds of its validators."""
    field = Job._meta.get_field(name)
    assert isinstance(field, FloatField)
    validators = field.validators
    low = max(v.limit_value for v in validators if isinstance(v, MinValueValidator))
    high = min(v.limit_value for v in validators if isinstance(v, MaxValueValidator))
    return low, high


def _whole(name: str) -> dict[str, Any]:
    low, high = job_field_range(name)
    return {"type": "integer", "minimum": low, "maximum": high}


def _number(name: str) -> dict[str, Any]:
    low, high = job_number_range(name)
    return {"type": "number", "minimum": low, "maximum": high}


_POLICY_PROPERTIES: dict[str, dict[str, Any]] = {
    "overlap": {"type": "string", "enum": Overlap.values},
    "start_deadline": _whole("start_deadline"),
    "catch_up": {"type": "string", "enum": CatchUp.values},
    "on_lost": {"type": "string", "enum": OnLost.values},
    "max_retries": _whole("max_retries"),
    "retry_backoff": _whole("retry_backoff"),
    "soft_time_limit": _nullable(_whole("soft_time_limit")),
    "time_limit": _nullable(_whole("time_limit")),
    "lease_ttl": _whole("lease_ttl"),
    "queue": {"type": "string", "minLength": 1, "maxLength": 100},
    "priority": _nullable(_whole("priority")),
    "max_concurrency": _whole("max_concurrency"),
    "rate_limit_runs": _nullable(_whole("rate_limit_runs")),
    "rate_limit_period": _nullable(_whole("rate_limit_period")),
    "coalesce": {"type": "boolean"},
    "business_days_only": {"type": "boolean"},
    "holiday_calendar": {"type": "string", "maxLength": 16},
    "active_from": _nullable(_DATETIME),
    "active_until": _nullable(_DATETIME),
    "alert_channels": {"type": "string", "enum": alert_channel_values()},
    "alert_reasons": {
        "type": "array",
        "items": {"type": "string", "enum": list(JOB_ALERT_REASONS)},
        "uniqueItems": True,
        "description": "The reasons this job's incidents are notified for; empty: all.",
    },
    "max_duration": {
        **_nullable(_whole("max_duration")),
        "description": "Seconds after which a run is running long, whatever its baseline or "
        "time limit; null: judged by those.",
    },
    "long_run_factor": {
        **_nullable(_number("long_run_factor")),
        "description": "A run is running long past this many times the p95 of its last "
        "successful durations; null: 3.",
    },
    "min_duration": {
        **_nullable(_whole("min_duration")),
        "description": "Seconds under which a success is too short; null: only the baseline "
        "judges.",
    },
    "baseline_alerts": {
        "type": "boolean",
        "description": "Judge runs against the duration baseline (running long, too short); "
        "false: only the maximum and minimum durations and the time limits.",
    },
}

# The schedule fields of POST /api/jobs and PATCH /api/jobs/{name}: `jobs add`'s options.
_SCHEDULE_PROPERTIES: dict[str, dict[str, Any]] = {
    "every": {
        "oneOf": [{"type": "string", "minLength": 1}, {"type": "integer", "minimum": 1}],
        "description": 'An interval: a duration such as "10s" or "1h30m", or seconds.',
    },
    "cron": {
        "type": "string",
        "description": "Five cron fields, as Celery's crontab reads them, e.g. `0 3 * * *`.",
    },
    "tz": {"type": "string", "description": "The IANA time zone of `cron` (default UTC)."},
    "at": {**_DATETIME, "description": "Once, at this time (UTC if no offset)."},
    "continuous": {"type": "boolean", "enum": [True], "description": "Always on one node."},
    "triggered": {
        "type": "boolean",
        "enum": [True],
        "description": "No schedule of its own: after its upstreams, run now, the API.",
    },
}

_SCHEMAS: dict[str, Any] = {
    "Error": {
        "type": "object",
        "required": ["error"],
        "properties": {
            "error": {"type": "string"},
            "fields": {
                "type": "object",
                "description": "What was wrong, under the name of each parameter, header or "
                "body field (`body` for the body as a whole).",
                "additionalProperties": {"type": "array", "items": {"type": "string"}},
            },
        },
    },
    "Job": {
        "type": "object",
        "required": [
            "name",
            "task",
            "kind",
            "enabled",
            "paused_by",
            "pause_reason",
            "paused_until",
            "schedule",
            "schedule_error",
            "next_slot",
            "args",
            "kwargs",
            *_POLICY_PROPERTIES,
            "alerts_muted_until",
            "headers",
            "expires_at",
            "one_off",
            "after",
            "before",
            "managed_by_code",
            "created_at",
            "updated_at",
        ],
        "properties": {
            "name": {"type": "string"},
            "task": {"type": "string", "description": "The registered job function."},
            "kind": {"type": "string", "enum": JobKind.values},
            "enabled": {"type": "boolean", "description": "false: paused."},
            "paused_by": {
                "type": "string",
                "description": "Who paused it, as the audit trail names actors (`user:ann`, "
                "`token:deploy`, `cli:ops`, `code:expiry`); empty while it runs or when paused "
                "before pauses recorded it.",
            },
            "pause_reason": {"type": "string", "description": "Why it is paused (may be empty)."},
            "paused_until": _nullable(
                {
                    **_DATETIME,
                    "description": "When the beats resume it by themselves (null: when someone "
                    "resumes it).",
                }
            ),
            "schedule": {"type": "string", "description": "The schedule in words."},
            "schedule_error": _nullable(
                {
                    "type": "string",
                    "description": "Why no beat can schedule this job (null: none); it clears "
                    "once the job is fixed.",
                }
            ),
            "next_slot": _nullable(
                {**_DATETIME, "description": "null when paused, continuous, finished or expired."}
            ),
            "args": {"type": "array", "items": {}},
            "kwargs": {"type": "object"},
            **_POLICY_PROPERTIES,
            "alerts_muted_until": _MUTED_UNTIL,
            "headers": {
                "type": "object",
                "description": "Custom headers of every run's message (an adopted "
                "django-celery-beat row's); tasks read them on self.request.",
            },
            "expires_at": _nullable(
                {
                    **_DATETIME,
                    "description": "No slot from then on, and a run not started by then does "
                    "not run; the job is paused once it passed (null: never).",
                }
            ),
            "one_off": {
                "type": "boolean",
                "description": "Runs its first slot only, then is paused (django-celery-beat's "
                "one_off).",
            },
            "after": _AFTER,
            "before": {
                "type": "array",
                "items": {"type": "string"},
                "description": "The jobs that run after this one.",
            },
            "managed_by_code": {"type": "boolean"},
            "created_at": _DATETIME,
            "updated_at": _DATETIME,
        },
    },
    "JobList": {
        "type": "object",
        "required": ["results"],
        "properties": {"results": {"type": "array", "items": _ref("Job")}},
    },
    "JobNew": {
        "type": "object",
        "required": ["name", "task"],
        "additionalProperties": False,
        "description": "A job as `jobs add` makes it, by the names of its options: `name`, "
        "`task`, exactly one schedule (`every`, `cron` with `tz`, `at`, `continuous` or "
        "`triggered`), and optionally `after`, `args`, `kwargs`, `paused` and each policy "
        "(durations in seconds); validated as `jobs add` validates it.",
        "properties": {
            "name": {"type": "string", "minLength": 1, "description": "Unique job name."},
            "task": {"type": "string", "minLength": 1, "description": "A registered task."},
            **_SCHEDULE_PROPERTIES,
            "after": _AFTER,
            "args": {"type": "array", "items": {}, "description": "Positional arguments."},
            "kwargs": {"type": "object", "description": "Keyword arguments."},
            "paused": {"type": "boolean", "default": False, "description": "Add it paused."},
            **_POLICY_PROPERTIES,
            "min_hold": _whole("min_hold"),
        },
    },
    "JobPatch": {
        "type": "object",
        "minProperties": 1,
        "additionalProperties": False,
        "description": "Pause/resume (`enabled`), policies and the schedule: a schedule given "
        "(`every`, `cron` with `tz`, `at`, `continuous` or `triggered`, as in `jobs add`) "
        "replaces the job's. A change other than `enabled` makes the job the operator's: later "
        "changes to its declaration in code no longer apply.",
        "properties": {
            "enabled": {"type": "boolean"},
            **_POLICY_PROPERTIES,
            "alerts_muted_until": _MUTED_UNTIL,
            "after": _AFTER,
            **_SCHEDULE_PROPERTIES,
        },
    },
    "Run": {
        "type": "object",
        "required": [
            *RUN_FIELDS,
            "task_id",
            "created_at",
            "lag_seconds",
            "duration_seconds",
            "duration_upper_bound",
            "idempotency_key",
            "retry_of",
        ],
        "properties": {
            "id": {"type": "integer"},
            "job": {"type": "string"},
            "scheduled_for": {**_DATETIME, "description": "The slot, or the trigger time."},
            "status": {"type": "string", "enum": RunStatus.values},
            "trigger": {"type": "string", "enum": Trigger.values},
            "attempt": {"type": "integer"},
            "fencing_token": _nullable({"type": "integer"}),
            "node": {"type": "string"},
            "pid": _nullable({"type": "integer"}),
            "task_id": {"type": "string", "description": "The Celery task id (jobrun-<id>)."},
            "created_at": _DATETIME,
            "started_at": _nullable(_DATETIME),
            "finished_at": _nullable(_DATETIME),
            "lag_seconds": _nullable({"type": "number", "description": "Start minus slot."}),
            "duration_seconds": _nullable({"type": "number"}),
            "duration_upper_bound": {
                "type": "boolean",
                "description": "True for a lost run: it ended when it was recorded lost, so it "
                "ran at most duration_seconds (its worker may have died sooner).",
            },
            "error": {"type": "string"},
            "idempotency_key": _nullable({"type": "string"}),
            "retry_of": _nullable({"type": "integer"}),
            "traceback": {"type": "string", "description": "Only on GET /api/runs/{id}."},
        },
    },
    "AuditEntry": {
        "type": "object",
        "required": ["id", "at", "actor", "source", "action", "job", "target", "before", "after"],
        "properties": {
            "id": {"type": "integer"},
            "at": {**_DATETIME, "description": "When, by the database clock."},
            "actor": {
                "type": "string",
                "description": "Who: user:NAME, token:NAME, cli:OS-USER or code:WHAT.",
            },
            "source": {"type": "string", "enum": AuditSource.values},
            "action": {"type": "string", "enum": AuditAction.values},
            "job": _nullable({"type": "string", "description": "The job's name at the time."}),
            "target": _nullable({"type": "string", "description": "The lease key or token."}),
            "before": _nullable(
                {
                    "type": "object",
                    "description": "The values before: the whole job for delete, the changed "
                    "fields for edit, null for add.",
                }
            ),
            "after": _nullable(
                {
                    "type": "object",
                    "description": "The values after: the whole job for add, the changed "
                    "fields for edit, null for delete.",
                }
            ),
        },
    },
    "AuditList": {
        "type": "object",
        "required": ["results", "next"],
        "properties": {
            "results": {"type": "array", "items": _ref("AuditEntry")},
            "next": _nullable({"type": "string", "description": "The next page, if any."}),
        },
    },
    "Blackout": {
        "type": "object",
        "required": ["name", "job", "starts_at", "ends_at", "description"],
        "properties": {
            "name": {"type": "string"},
            "job": _nullable({"type": "string", "description": "null: every job."}),
            "starts_at": _DATETIME,
            "ends_at": _DATETIME,
            "description": {"type": "string"},
        },
    },
    "BlackoutNew": {
        "type": "object",
        "required": ["name", "starts_at", "ends_at"],
        "additionalProperties": False,
        "properties": {
            "name": {"type": "string", "minLength": 1, "maxLength": 100, "pattern": "^[^/]*$"},
            "job": _nullable({"type": "string", "description": "Omitted or null: every job."}),
            "starts_at": {**_DATETIME, "description": "The first instant frozen."},
            "ends_at": {**_DATETIME, "description": "The first instant no longer frozen."},
            "description": {"type": "string", "maxLength": text.MAX_DESCRIPTION},
        },
    },
    "BlackoutList": {
        "type": "object",
        "required": ["results"],
        "properties": {"results": {"type": "array", "items": _ref("Blackout")}},
    },
    "PauseRequest": {
        "type": "object",
        "additionalProperties": False,
        "properties": _PAUSE_PROPERTIES,
    },
    "PauseManyRequest": {
        "type": "object",
        "additionalProperties": False,
        "description": "At least one of `queue` and `match`; a job must fit both given.",
        "properties": {**_SELECTION_PROPERTIES, **_PAUSE_PROPERTIES},
    },
    "ResumeManyRequest": {
        "type": "object",
        "additionalProperties": False,
        "description": "At least one of `queue` and `match`; a job must fit both given.",
        "properties": _SELECTION_PROPERTIES,
    },
    "Paused": {
        "type": "object",
        "required": ["paused"],
        "properties": {
            "paused": {
                "type": "array",
                "items": {"type": "string"},
                "description": "The jobs paused, by name (those already paused are left as "
                "they were: their reason and end stay theirs).",
            }
        },
    },
    "Resumed": {
        "type": "object",
        "required": ["resumed"],
        "properties": {
            "resumed": {
                "type": "array",
                "items": {"type": "string"},
                "description": "The jobs resumed, by name.",
            }
        },
    },
    "BackfillRequest": {
        "type": "object",
        "required": ["since", "until"],
        "additionalProperties": False,
        "properties": {
            "since": {**_DATETIME, "description": "The first slot to fill (inclusive)."},
            "until": {**_DATETIME, "description": "The last (inclusive); not in the future."},
            "max_runs": {
                "type": "integer",
                "minimum": 1,
                "maximum": MAX_BACKFILL_RUNS,
                "default": DEFAULT_BACKFILL_RUNS,
                "description": "Refuse a range with more slots to fill than this.",
            },
            "dry_run": {"type": "boolean", "default": False},
        },
    },
    "Backfill": {
        "type": "object",
        "required": _BACKFILL_FIELDS,
        "properties": {
            "job": {"type": "string"},
            "since": _DATETIME,
            "until": _DATETIME,
            "dry_run": {"type": "boolean"},
            "missing": {"type": "integer", "description": "Slots in the range without a run."},
            "on_record": {"type": "integer", "description": "Slots that have one already."},
            "created": {"type": "integer", "description": "Runs this request made."},
            "first_slot": _nullable(_DATETIME),
            "last_slot": _nullable(_DATETIME),
            "slots": {
                "type": "array",
                "items": _ref("SlotFate"),
                "description": "A dry run: each slot it would fill, with that run's fate "
                "(empty for a backfill made).",
            },
        },
    },
    "SlotFate": {
        "type": "object",
        "required": ["slot", "local", "zone", "fate", "reason", "blackout", "dst"],
        "properties": {
            "slot": {**_DATETIME, "description": "The slot, in UTC."},
            "local": {
                "type": "string",
                "description": "The slot on the job's wall clock, with its offset (ISO 8601).",
            },
            "zone": {"type": "string", "description": "The zone its days are judged in."},
            "fate": {
                "type": "string",
                "enum": [str(outcome) for outcome in Outcome],
                "description": "`runs`: a run is recorded and sent; `skipped`: a run is "
                "recorded skipped, saying why; `not scheduled`: no run (outside the job's "
                "active period, after it expired, or while it is paused).",
            },
            "reason": _nullable(
                {
                    "type": "string",
                    "description": "Why it is skipped (the error its run is recorded with: "
                    "`blackout: NAME`, `weekend: ...`, `holiday: ...`) or not scheduled.",
                }
            ),
            "blackout": _nullable(
                {"type": "string", "description": "The blackout window that skips it."}
            ),
            "dst": {
                "type": "array",
                "items": {"type": "string"},
                "description": "The DST changes it crosses since the slot before, and what "
                "they do to it (a wall time that does not exist, or comes twice), in the job's "
                "zone and in UTC.",
            },
        },
    },
    "Upcoming": {
        "type": "object",
        "required": ["job", "schedule", "since", "results"],
        "properties": {
            "job": {"type": "string"},
            "schedule": {"type": "string", "description": "The schedule in words."},
            "since": {**_DATETIME, "description": "Slots at or after this instant are listed."},
            "results": {"type": "array", "items": _ref("SlotFate")},
        },
    },
    "RunLog": {
        "type": "object",
        "required": ["run", "status", "lines", "cursor", "finished"],
        "properties": {
            "run": {"type": "integer"},
            "status": {"type": "string", "enum": RunStatus.values},
            "lines": {"type": "array", "items": _ref("RunLogLine")},
            "cursor": {
                "type": "integer",
                "description": "The last line's seq: ask again with it for the lines that follow.",
            },
            "finished": {
                "type": "boolean",
                "description": "The run ended and every line of its log was given: stop asking.",
            },
        },
    },
    "RunLogLine": {
        "type": "object",
        "required": ["seq", "at", "level", "message", "cut"],
        "properties": {
            "seq": _nullable({"type": "integer", "description": "The line's number, from 1."}),
            "at": _nullable({**_DATETIME, "description": "When it was logged (worker's clock)."}),
            "level": {
                "type": "string",
                "description": "DEBUG to CRITICAL; STDOUT or STDERR for a printed line; CUT for "
                "the note of lines cut by the run's bounds.",
            },
            "message": {"type": "string", "description": "Secrets (URL passwords) masked."},
            "cut": {
                "type": "integer",
                "description": "How many lines were cut here (a CUT note); 0 for a line.",
            },
        },
    },
    "RunList": {
        "type": "object",
        "required": ["results", "next"],
        "properties": {
            "results": {"type": "array", "items": _ref("Run")},
            "next": _nullable({"type": "string", "description": "The next page, if any."}),
        },
    },
}


@cache
def schema() -> dict[str, Any]:
    job = _json("The job.", _ref("Job"))
    return {
        "openapi": "3.0.3",
        "info": {
            "title": "clusterjobs",
            "version": "1",
            "description": "Periodic jobs that run once per slot across a cluster: list jobs "
            "and runs, trigger a run at most once per Idempotency-Key, pause and resume.",
        },
        "servers": [{"url": "/"}],
        "security": [{"bearer": []}],
        "components": {
            "securitySchemes": {
                "bearer": {
                    "type": "http",
                    "scheme": "bearer",
                    "description": "`manage.py apitoken create NAME` prints a token once. "
                    "A logged-in staff session works too (writes then need X-CSRFToken).",
                }
            },
            "schemas": _SCHEMAS,
        },
        "paths": {
            "/api/jobs": {
                "get": {
                    "operationId": "listJobs",
                    "summary": "List jobs.",
                    "parameters": [
                        _query(
                            "enabled",
                            "true: running jobs; false: paused ones.",
                            {"type": "string", "enum": ["true", "false"]},
                        ),
                        _query(
                            "kind",
                            "Only jobs of this kind.",
                            {"type": "string", "enum": JobKind.values},
                        ),
                    ],
                    "responses": {"200": _json("The jobs.", _ref("JobList")), **_BAD, **_ERRORS},
                },
                "post": {
                    "operationId": "createJob",
                    "summary": "Add a job, as `jobs add` does.",
                    "description": "The same field names, validation and audit entry as "
                    "`jobs add`. A retried request cannot make a second job: the name is unique, "
                    "so a retry finds it taken (409) and GET /api/jobs/{name} shows the job.",
                    "requestBody": {
                        "required": True,
                        "content": {"application/json": {"schema": _ref("JobNew")}},
                    },
                    "responses": {
                        "201": {
                            **_json("The job added.", _ref("Job")),
                            "headers": {
                                "Location": {
                                    "description": "The job's URL.",
                                    "schema": {"type": "string"},
                                }
                            },
                        },
                        **_BAD,
                        "409": _error("A job with that name already exists."),
                        **_ERRORS,
                    },
                },
            },
            "/api/jobs/{name}": {
                "parameters": [_JOB_NAME],
                "get": {
                    "operationId": "getJob",
                    "summary": "One job.",
                    "responses": {"200": job, **_BAD, **_NOT_FOUND, **_ERRORS},
                },
                "delete": {
                    "operationId": "deleteJob",
                    "summary": "Delete a job, its beat entry and its run history, as "
                    "`jobs remove` does.",
                    "responses": {
                        "204": {"description": "Deleted."},
                        **_BAD,
                        **_NOT_FOUND,
                        **_ERRORS,
                    },
                },
                "patch": {
                    "operationId": "updateJob",
                    "summary": "Pause/resume, change policies or replace the schedule.",
                    "requestBody": {
                        "required": True,
                        "content": {"application/json": {"schema": _ref("JobPatch")}},
                    },
                    "responses": {"200": job, **_BAD, **_NOT_FOUND, **_ERRORS},
                },
            },
            "/api/jobs/{name}/pause": {
                "parameters": [_JOB_NAME],
                "post": {
                    "operationId": "pauseJob",
                    "summary": "Pause: no new slots until resumed (by hand, or by the beats at "
                    "`until`). Pausing a paused job replaces its reason and end.",
                    "requestBody": {
                        "required": False,
                        "content": {"application/json": {"schema": _ref("PauseRequest")}},
                    },
                    "responses": {"200": job, **_BAD, **_NOT_FOUND, **_ERRORS},
                },
            },
            "/api/jobs:pause": {
                "post": {
                    "operationId": "pauseJobs",
                    "summary": "Pause every running job on a queue and/or whose name matches a "
                    "pattern, each audited, all or none.",
                    "requestBody": {
                        "required": True,
                        "content": {"application/json": {"schema": _ref("PauseManyRequest")}},
                    },
                    "responses": {
                        "200": _json("The jobs paused.", _ref("Paused")),
                        **_BAD,
                        **_ERRORS,
                    },
                },
            },
            "/api/jobs:resume": {
                "post": {
                    "operationId": "resumeJobs",
                    "summary": "Resume every paused job on a queue and/or whose name matches a "
                    "pattern, each audited, all or none.",
                    "requestBody": {
                        "required": True,
                        "content": {"application/json": {"schema": _ref("ResumeManyRequest")}},
                    },
                    "responses": {
                        "200": _json("The jobs resumed.", _ref("Resumed")),
                        **_BAD,
                        **_ERRORS,
                    },
                },
            },
            "/api/jobs/{name}/resume": {
                "parameters": [_JOB_NAME],
                "post": {
                    "operationId": "resumeJob",
                    "summary": "Resume a paused job.",
                    "responses": {"200": job, **_BAD, **_NOT_FOUND, **_ERRORS},
                },
            },
            "/api/jobs/{name}/runs": {
                "parameters": [_JOB_NAME],
                "get": {
                    "operationId": "listJobRuns",
                    "summary": "The job's runs, newest slot first.",
                    "parameters": _RUN_FILTERS,
                    "responses": {
                        "200": _json("A page of runs.", _ref("RunList")),
                        **_BAD,
                        **_NOT_FOUND,
                        **_ERRORS,
                    },
                },
                "post": {
                    "operationId": "triggerRun",
                    "summary": "Trigger a run now, at most once per Idempotency-Key.",
                    "description": "The same key for the same job returns the first run "
                    "(200, Idempotent-Replayed: true) instead of making a second; keys are "
                    "remembered as long as the run is kept (see retention). The same key with "
                    "another body is refused (422). An optional body gives this run keyword "
                    "arguments over the job's own, checked against the function's signature.",
                    "requestBody": {
                        "required": False,
                        "content": {
                            "application/json": {
                                "schema": {
                                    "type": "object",
                                    "additionalProperties": False,
                                    "properties": {
                                        "kwargs": {
                                            "type": "object",
                                            "description": "At most "
                                            f"{text.MAX_ARGUMENTS_BYTES} bytes as compact "
                                            "UTF-8 JSON, merged with the job's own.",
                                        }
                                    },
                                }
                            }
                        },
                    },
                    "parameters": [
                        {
                            "name": "Idempotency-Key",
                            "in": "header",
                            "required": True,
                            "description": "A unique string per intended run, reused on "
                            "retries; printable ASCII without a comma (a server joins a header "
                            "sent twice with one: answered 400).",
                            "schema": {
                                "type": "string",
                                "minLength": 1,
                                "maxLength": IDEMPOTENCY_KEY_MAX,
                                "pattern": "^[!-+\\--~]+$",
                            },
                        }
                    ],
                    "responses": {
                        "201": _json("A new run, scheduled and published.", _ref("Run")),
                        "200": _json("The run this key already made.", _ref("Run")),
                        **_BAD,
                        **_NOT_FOUND,
                        "409": _error("A continuous job: it runs all the time, not per trigger."),
                        "422": _error("The key was already used with another body."),
                        **_ERRORS,
                    },
                },
            },
            "/api/jobs/{name}/upcoming": {
                "parameters": [_JOB_NAME],
                "get": {
                    "operationId": "listUpcomingSlots",
                    "summary": "The job's next slots, each with its fate.",
                    "description": "Worked out by the code the beats fire from: whether each "
                    "slot runs, is skipped by a blackout window (named) or the job's calendar "
                    "(weekends, holidays), or gets no run (outside the job's active period, "
                    "after it expired, paused), and the DST changes it crosses.",
                    "parameters": [
                        _query(
                            "count",
                            "How many slots.",
                            {
                                "type": "integer",
                                "minimum": 1,
                                "maximum": MAX_UPCOMING,
                                "default": DEFAULT_UPCOMING,
                            },
                        ),
                        _query(
                            "since",
                            "The first slot listed is at or after this instant (default: now).",
                            _DATETIME,
                        ),
                    ],
                    "responses": {
                        "200": _json("The slots, in order.", _ref("Upcoming")),
                        **_BAD,
                        **_NOT_FOUND,
                        "409": _error("A continuous job: it has no slots."),
                        **_ERRORS,
                    },
                },
            },
            "/api/jobs/{name}/backfill": {
                "parameters": [_JOB_NAME],
                "post": {
                    "operationId": "backfillJob",
                    "summary": "Make the runs of the past slots in a range that have none.",
                    "description": "One run per slot without one, as the beats would have made "
                    "it (two concurrent backfills of one range make each run once); they run "
                    "one at a time, oldest slot first, each within its start deadline from its "
                    "release. A range with more slots to fill than `max_runs` is refused; "
                    "`dry_run` makes nothing and lists each slot it would fill with its fate.",
                    "requestBody": {
                        "required": True,
                        "content": {"application/json": {"schema": _ref("BackfillRequest")}},
                    },
                    "responses": {
                        "201": _json("The runs made.", _ref("Backfill")),
                        "200": _json("A dry run: what would be made.", _ref("Backfill")),
                        **_BAD,
                        **_NOT_FOUND,
                        "409": _error("A continuous job: it has no slots."),
                        **_ERRORS,
                    },
                },
            },
            "/api/runs": {
                "get": {
                    "operationId": "listRuns",
                    "summary": "Runs of every job, newest slot first.",
                    "parameters": [
                        _query("job", "Only runs of this job.", {"type": "string"}),
                        *_RUN_FILTERS,
                    ],
                    "responses": {
                        "200": _json("A page of runs.", _ref("RunList")),
                        **_BAD,
                        **_ERRORS,
                    },
                }
            },
            "/api/runs/{run_id}": {
                "parameters": [
                    {
                        "name": "run_id",
                        "in": "path",
                        "required": True,
                        "schema": {"type": "integer", "minimum": 0},
                    }
                ],
                "get": {
                    "operationId": "getRun",
                    "summary": "One run, with its traceback.",
                    "responses": {
                        "200": _json("The run.", _ref("Run")),
                        **_BAD,
                        **_NOT_FOUND,
                        **_ERRORS,
                    },
                },
            },
            "/api/runs/{run_id}/log": {
                "parameters": [
                    {
                        "name": "run_id",
                        "in": "path",
                        "required": True,
                        "schema": {"type": "integer", "minimum": 0},
                    }
                ],
                "get": {
                    "operationId": "getRunLog",
                    "summary": "The run's own log: what its code logged and printed, after a "
                    "cursor; follow a running run by asking again with the cursor returned.",
                    "parameters": [
                        _query(
                            "cursor",
                            "Only the lines after this seq (the cursor of the last answer).",
                            {"type": "integer", "minimum": 0, "default": 0},
                        ),
                        _query(
                            "limit",
                            "At most this many lines.",
                            {
                                "type": "integer",
                                "minimum": 1,
                                "maximum": RUN_LOG_MAX_LIMIT,
                                "default": RUN_LOG_DEFAULT_LIMIT,
                            },
                        ),
                    ],
                    "responses": {
                        "200": _json("Lines of the run's log.", _ref("RunLog")),
                        **_BAD,
                        **_NOT_FOUND,
                        **_ERRORS,
                    },
                },
            },
            "/api/blackouts": {
                "get": {
                    "operationId": "listBlackouts",
                    "summary": "Blackout windows: their slots are recorded skipped.",
                    "responses": {
                        "200": _json("Every window.", _ref("BlackoutList")),
                        **_BAD,
                        **_ERRORS,
                    },
                },
                "post": {
                    "operationId": "addBlackout",
                    "summary": "Add a blackout window over one job or every job.",
                    "requestBody": {
                        "required": True,
                        "content": {"application/json": {"schema": _ref("BlackoutNew")}},
                    },
                    "responses": {
                        "201": _json("The window added.", _ref("Blackout")),
                        **_BAD,
                        **_ERRORS,
                    },
                },
            },
            "/api/blackouts/{name}": {
                "parameters": [
                    {
                        "name": "name",
                        "in": "path",
                        "required": True,
                        "description": "The window's name.",
                        "schema": {"type": "string", "minLength": 1},
                    }
                ],
                "delete": {
                    "operationId": "removeBlackout",
                    "summary": "Remove a blackout window.",
                    "responses": {
                        "204": {"description": "Removed."},
                        **_BAD,
                        **_NOT_FOUND,
                        **_ERRORS,
                    },
                },
            },
            "/api/audit": {
                "get": {
                    "operationId": "listAudit",
                    "summary": "The audit trail: who changed what, newest first.",
                    "parameters": [
                        _query(
                            "job",
                            "Only entries about this job (also from before it was deleted).",
                            {"type": "string"},
                        ),
                        _query("actor", "Only this actor, e.g. token:ci.", {"type": "string"}),
                        _query(
                            "action",
                            "Only this action.",
                            {"type": "string", "enum": AuditAction.values},
                        ),
                        _query(
                            "source",
                            "Only actions made through this edge.",
                            {"type": "string", "enum": AuditSource.values},
                        ),
                        _LIMIT,
                        _OFFSET,
                    ],
                    "responses": {
                        "200": _json("A page of entries.", _ref("AuditList")),
                        **_BAD,
                        **_ERRORS,
                    },
                }
            },
            "/api/openapi.json": {
                "get": {
                    "operationId": "openapi",
                    "summary": "This document.",
                    "security": [],
                    "responses": {"200": {"description": "The OpenAPI document."}, **_BAD},
                }
            },
        },
    }
