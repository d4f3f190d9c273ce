"""Helpers of ``manage.py jobs``: value parsing, one-line errors, records and tables.

Every error the CLI reports is one line, ``jobs VERB: error: FLAG: what is wrong``, and carries
its exit status: ``USAGE`` (2) for bad flags, bad values and jobs the services reject,
``RUNTIME`` (1) for what only running could tell, such as a job name that does not exist.
Django's parser prints its usage before an error and says "CommandError:"
in front of it; scripts and people want the one line.
"""

from __future__ import annotations

import argparse
import json
import re
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any, NoReturn, TypeVar

from django.core.exceptions import ValidationError
from django.core.management.base import CommandError, CommandParser

from jobs.beat.slot_fates import Fate
from jobs.continuous.nodes import Liveness, with_liveness
from jobs.models import LIVE_LEASE, Incident, Job, JobRun, Lease, Node, RunStatus
from jobs.registry import POLICY_FIELDS, JobSpec
from jobs.schedule.kinds import (
    describe,
    parse_duration,
    parse_instant,
    parse_interval,
    validate_cron,
    validate_timezone,
)
from jobs.values import jsonvalues, text
from jobs.values.serializers import job_fields, next_slot, next_slot_words, run_fields

USAGE = 2
RUNTIME = 1

# Policy fields in the model's order, so flags, records and help read the same way everywhere.


def policy_flag(field: str) -> str:
    return "--" + field.replace("_", "-")


# Which flag of `jobs add` supplied each field, to name it when the services reject a value.
FIELD_FLAGS: dict[str, str] = {
    "name": "NAME",
    "task": "--task",
    "enabled": "--paused",
    "args": "--args",
    "kwargs": "--kwargs",
    "after": "--after",
    "run_at": "--at",
    "every": "--every",
    "cron": "--cron",
    "tz": "--tz",
    "at": "--at",
    "continuous": "--continuous",
    "triggered": "--triggered",
    "paused": "--paused",
    **{field: policy_flag(field) for field in POLICY_FIELDS},
}

LEASE_FIELDS = ("key", "holder", "token", "acquired_at", "expires_at")
NODE_FIELDS = (
    "name",
    "host",
    "pid",
    "queues",
    "concurrency",
    "version",
    "state",
    "started_at",
    "last_heartbeat",
)


# --- errors ---------------------------------------------------------------------------------


class CliError(CommandError):
    """An error for one line of stderr, ``jobs VERB: error: DETAIL``, with its exit status."""

    def __init__(self, verb: str | None, detail: str, *, returncode: int = USAGE) -> None:
        prefix = f"jobs {verb}" if verb else "jobs"
        # Messages from validators or JSON may span lines; the contract is one line, which a
        # UTF-8 terminal can print even when it quotes an argument that was not UTF-8.
        line = f"{prefix}: error: {' '.join(text.printable(detail).split())}"
        super().__init__(line, returncode=returncode)


class ParseError(CliError):
    """Raised while the command line is parsed, before Django's own error handling is in place."""


class CliParser(CommandParser):
    """The parser of ``jobs`` and of each verb: errors become a ``ParseError`` (never usage text
    and ``SystemExit``), whether called from a shell or through ``call_command``."""

    verb: str | None = None

    def __init__(self, *, verb: str | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.verb = verb
        # argparse takes "-5s" for an unknown flag, so `--every -5s` would fail with "expected
        # one argument"; read anything that starts like a negative number as a value, and let
        # the value's own check say what is wrong with it. No flag of ours looks like that.
        self._negative_number_matcher = re.compile(r"^-\.?\d")

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        if self.verb is not None and args is not None:
            self._check_storable(list(args))
        # A verb's parser is run with parse_known_args; left alone, its unknown flags would be
        # reported by the top-level parser, which does not know which verb they were given to.
        parsed, extras = super().parse_known_args(args, namespace)
        if extras:
            self.error(f"unrecognized arguments: {' '.join(extras)}")
        return parsed, extras

    def error(self, message: str) -> NoReturn:
        raise ParseError(self.verb, message.removeprefix("argument "))

    def _check_storable(self, args: list[str]) -> None:
        """Refuse an argument the database cannot store (``jobs.values.text``) before anything reads
        it, naming its flag (or NAME): a shell passes invalid UTF-8 bytes, which Python holds as
        lone surrogates. A parser of sub-verbs leaves it to theirs, which know the names."""
        if any(isinstance(action, argparse._SubParsersAction) for action in self._actions):
            return
        for name, value in self._named_arguments(args):
            problem = text.problem(value)
            if problem is not None:
                self.error(f"{name}: {_shown(value)} {problem}")

    def _named_arguments(self, args: list[str]) -> Iterator[tuple[str, str]]:
        """Each argument with the flag or positional's name it is given to (as the parse would
        see it, short of abbreviations)."""
        positionals = [action for action in self._actions if not action.option_strings]
        flag, position, options_done = "", 0, False
        for arg in args:
            if flag:
                yield flag, arg
                flag = ""
            elif arg == "--" and not options_done:
                options_done = True
            elif arg.startswith("-") and not options_done and not self._is_value(arg):
                option, given, value = arg.partition("=")
                yield option, value if given else option
                action = self._option_string_actions.get(option)
                flag = option if not given and action is not None and action.nargs != 0 else ""
            else:
                action = positionals[min(position, len(positionals) - 1)] if positionals else None
                yield (str(action.metavar or action.dest) if action else "argument"), arg
                if action is not None and action.nargs not in ("*", "+"):
                    position += 1

    def _is_value(self, arg: str) -> bool:
        return arg == "-" or self._negative_number_matcher.match(arg) is not None


def validation_detail(exc: ValidationError, flags: Mapping[str, str] = FIELD_FLAGS) -> str:
    """A services ``ValidationError`` as ``FLAG: message; FLAG: message``."""
    if not hasattr(exc, "error_dict"):
        return " ".join(exc.messages)
    parts = []
    for field, messages in exc.message_dict.items():
        text = " ".join(messages)
        parts.append(f"{flags[field]}: {text}" if field in flags else text)
    return "; ".join(parts)


@contextmanager
def validated(verb: str, flags: Mapping[str, str] = FIELD_FLAGS) -> Iterator[None]:
    """Turn a services ``ValidationError`` raised inside into ``verb``'s one-line error, each
    field named by the flag that set it (``validation_detail``)."""
    try:
        yield
    except ValidationError as exc:
        raise CliError(verb, validation_detail(exc, flags)) from None


# --- argument types -------------------------------------------------------------------------

T = TypeVar("T")


def argument_type(parse: Callable[[str], T]) -> Callable[[str], T]:
    """Make ``parse``'s ``ValueError`` message the argparse error (argparse would otherwise
    replace it with "invalid <function name> value")."""

    def convert(text: str) -> T:
        try:
            return parse(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    convert.__name__ = parse.__name__
    return convert


@argument_type
def duration(text: str) -> int:
    """``"90s"``, ``"5m"``, ``"1h30m"`` or ``"30"`` as a positive whole number of seconds."""
    seconds = parse_duration(text).total_seconds()
    if seconds <= 0:
        raise ValueError(f"{text!r}: the duration must be positive")
    if seconds != int(seconds):
        raise ValueError(f"{text!r}: the duration must be a whole number of seconds")
    return int(seconds)


interval = argument_type(parse_interval)


@argument_type
def cron(text: str) -> str:
    return validate_cron(text)


@argument_type
def timezone_name(text: str) -> str:
    validate_timezone(text)
    return text


@argument_type
def instant(text: str) -> datetime:
    return parse_instant(text).when


@argument_type
def names(text: str) -> list[str]:
    """A comma-separated list of job names."""
    found = [name.strip() for name in text.split(",") if name.strip()]
    if not found:
        raise ValueError(f"{_shown(text)}: give job names separated by commas")
    return found


@argument_type
def json_value(text: str) -> Any:
    try:
        value = jsonvalues.loads(text)
        jsonvalues.check_storable(value)
    except ValueError as exc:
        raise ValueError(f"{_shown(text)}: {exc}") from None
    return value


def _shown(text: str, limit: int = 60) -> str:
    """``text`` quoted for an error line, cut short: a value may be megabytes long."""
    return repr(text) if len(text) <= limit else repr(text[: limit - 1]) + "…"


def _at_least_one(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise ValueError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise ValueError(f"{text!r}: must be at least 1")
    return value


positive_int = argument_type(_at_least_one)


def count_up_to(most: int) -> Callable[[str], int]:
    """A whole number from 1 to ``most``."""

    @argument_type
    def count(text: str) -> int:
        value = _at_least_one(text)
        if value > most:
            raise ValueError(f"{text!r}: must be at most {most:,}")
        return value

    return count


@argument_type
def run_id(text: str) -> int:
    """A run's id: a whole number a run's id can be (PostgreSQL's bigint)."""
    digits = len(text) <= 19 and text.isascii() and text.isdigit()
    if not digits or not 1 <= int(text) <= 2**63 - 1:
        raise ValueError(f"{_shown(text)} is not a run id (a whole number, e.g. 42)")
    return int(text)


@argument_type
def seconds(text: str) -> float:
    """A number of seconds, zero or more: ``"2"``, ``"0.5"``, ``"0"``."""
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"{_shown(text)} is not a number of seconds") from None
    if not 0 <= value <= 3600:
        raise ValueError(f"{text!r}: give between 0 and 3600 seconds")
    return value


@argument_type
def number(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise ValueError(f"{_shown(text)} is not a number") from None


# What a flag that may clear a setting reads for "none" (its default, None, means "unchanged").
CLEAR = "none"


def or_none(parse: Callable[[str], T]) -> Callable[[str], T | str]:
    """``parse``, or ``CLEAR`` for ``none``."""

    def convert(text: str) -> T | str:
        return CLEAR if text.strip().lower() == CLEAR else parse(text)

    convert.__name__ = parse.__name__
    return convert


@argument_type
def yes_no(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in ("yes", "true", "on", "1"):
        return True
    if lowered in ("no", "false", "off", "0"):
        return False
    raise ValueError(f"{text!r}: give yes or no")


@argument_type
def reasons(text: str) -> list[str]:
    """``"failed,lost"`` as a list of alert reasons; ``""`` or ``all``: every reason."""
    if text.strip().lower() == "all":
        return []
    return [item.strip() for item in text.split(",") if item.strip()]


# --- records (the --json output) ------------------------------------------------------------


def jsonable(value: object) -> object:
    """``value`` with its datetimes (nested in lists and dicts too) as ISO 8601 text."""
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, list | tuple):
        return [jsonable(item) for item in value]
    if isinstance(value, dict):
        return {key: jsonable(item) for key, item in value.items()}
    return value


def job_record(job: Job) -> dict[str, object]:
    """Expects ``JOB_DISPLAY_RELATED`` selected with the job."""
    return {key: jsonable(value) for key, value in job_fields(job).items()}


INCIDENT_FIELDS = (
    "id", "kind", "reason", "summary", "opened_at", "resolved_at", "bad_runs", "first_run_id",
    "last_run_id", "resolved_by_run_id",
)  # fmt: skip


def incident_record(incident: Incident) -> dict[str, object]:
    """Expects ``job`` selected with the incident; ``job`` is null for the cluster's."""
    values = {field: jsonable(getattr(incident, field)) for field in INCIDENT_FIELDS}
    values["job"] = incident.job.name if incident.job else None
    return values


def job_now(job: Job, now: datetime) -> tuple[dict[str, object], dict[str, str]]:
    """What the admin's job page shows of a job now and ``jobs show`` adds, as ``--json`` writes
    it and as the text reads: its next slot, its last run (by slot) and the live lease of its
    key, by the database clock."""
    run = job.runs.order_by("-scheduled_for", "-id").first()
    held = Lease.objects.filter(LIVE_LEASE, key=job.lock_key).first()
    record = {
        "next_slot": jsonable(next_slot(job, now)),
        "last_run": None if run is None else {
            "id": run.pk, "status": run.status, "scheduled_for": jsonable(run.scheduled_for)
        },
        "lease": None if held is None else {
            "holder": held.holder, "token": held.token, "expires_at": jsonable(held.expires_at)
        },
    }  # fmt: skip
    lines = {
        "next_slot": next_slot_words(job, now, cell),
        "last_run": "-" if run is None else
        f"#{run.pk} {run.status}, slot {cell(run.scheduled_for)}",
        "lease": "-" if held is None else
        f"{held.holder} #{held.token}, expires {cell(held.expires_at)}",
    }  # fmt: skip
    return record, lines


def run_record(run: JobRun) -> dict[str, object]:
    """Expects ``job`` selected with the run."""
    return {key: jsonable(value) for key, value in run_fields(run).items()}


# How often `jobs run` reads its run while it waits for a worker's verdict.
RUN_POLL_SECONDS = 0.05


def a_worker_serves(queue: str) -> bool:
    """Whether a live node (by the database clock) consumes ``queue``: without one, nothing
    will settle a run soon, and waiting for it would only be slower."""
    nodes = with_liveness(Node.objects.all())
    return any(node.liveness == Liveness.ALIVE and queue in node.queues for node in nodes)


def awaited_run(run_id: int, seconds: float) -> JobRun:
    """The run once a worker claimed it (``running``) or settled it at once (``skipped``:
    its lease held; ``missed``; ...), or as it is after ``seconds``; ``job`` selected."""
    deadline = time.monotonic() + seconds
    while True:
        run = JobRun.objects.select_related("job").get(pk=run_id)
        if run.status != RunStatus.SCHEDULED or time.monotonic() >= deadline:
            return run
        time.sleep(RUN_POLL_SECONDS)


def run_outcome(run: JobRun) -> str:
    """A settled run in one line, e.g. ``run 42 of nightly: skipped — lease job:nightly held
    by worker1@host (token 7)``; expects ``job`` selected with the run."""
    said = f"run {run.pk} of {run.job.name}: {run.status}"
    reason = first_line(run.error, limit=200)
    return f"{said} — {reason}" if reason else said


def lease_record(lease: Lease) -> dict[str, object]:
    return {field: jsonable(getattr(lease, field)) for field in LEASE_FIELDS}


def node_record(node: Node) -> dict[str, object]:
    return {field: jsonable(getattr(node, field)) for field in NODE_FIELDS}


def task_record(spec: JobSpec) -> dict[str, object]:
    schedule = describe(spec.schedule) if spec.declares_job else None
    return {
        "name": spec.name,
        "kind": spec.origin.lower(),
        "summary": spec.summary,
        "schedule": schedule,
    }


def to_json(data: object, indent: int | None = 2) -> str:
    return json.dumps(data, indent=indent, ensure_ascii=False)


# --- human output ---------------------------------------------------------------------------


def cell(value: object) -> str:
    if value is None or value == "":
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, datetime):
        return value.astimezone(UTC).isoformat(timespec="seconds")
    if isinstance(value, list | tuple):
        return ",".join(str(item) for item in value) or "-"
    if isinstance(value, dict):
        return json.dumps(value)
    return str(value)


def table(headers: Sequence[str], rows: Iterable[Sequence[object]]) -> str:
    """Columns aligned on the widest cell, two spaces apart."""
    cells = [[cell(value) for value in row] for row in rows]
    widths = [
        max([len(header), *(len(row[i]) for row in cells)]) for i, header in enumerate(headers)
    ]
    lines = [headers, *cells]
    return "\n".join(
        "  ".join(text.ljust(width) for text, width in zip(line, widths, strict=True)).rstrip()
        for line in lines
    )


def fates_table(fates: Sequence[Fate]) -> str:
    """Slots and their fates, one row each, the DST changes a slot crosses on lines under it."""
    rows = [
        (
            fate.slot,
            f"{fate.local_words} ({fate.zone})",
            str(fate.outcome),
            fate.reason,
        )
        for fate in fates
    ]
    lines = table(("SLOT (UTC)", "LOCAL", "FATE", "WHY"), rows).split("\n")
    out = lines[:1]
    for fate, line in zip(fates, lines[1:], strict=True):
        out.append(line)
        out.extend(f"    DST: {note}" for note in fate.dst)
    return "\n".join(out)


def first_line(text: str, limit: int = 60) -> str:
    line = text.strip().splitlines()[0] if text.strip() else ""
    return line if len(line) <= limit else line[: limit - 1] + "…"
