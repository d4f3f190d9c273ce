"""The CLI tests' shared parts: the ``jobs`` command called in-process (its output, its JSON,
its error), a job added through it, and the job functions those tests add jobs of and list
(``jobs add``, ``jobs tasks``): a function with a default argument, and docstrings whose first
sentence wraps or is too long."""

from __future__ import annotations

import io
import json
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from jobs import job
from jobs.context import JobContext
from jobs.models import Job


def jobs(*args: str) -> str:
    out = io.StringIO()
    call_command("jobs", *args, stdout=out, stderr=io.StringIO())
    return out.getvalue()


def jobs_json(*args: str) -> Any:
    return json.loads(jobs(*args, "--json"))


def jobs_error(*args: str) -> CommandError:
    with pytest.raises(CommandError) as info:
        jobs(*args)
    return info.value


def add(name: str, *flags: str) -> Job:
    jobs("add", name, "--task", "tests.cli_example", *flags)
    return Job.objects.select_related("periodic_task").get(name=name)


@job("tests.cli_example")
def cli_example(ctx: JobContext, city: str = "Paris") -> str:
    """Greets a city, for the CLI tests.

    More lines that the tasks listing leaves out.
    """
    return f"hello {city}"


@job("tests.cli_wrapped_summary")
def cli_wrapped_summary(ctx: JobContext) -> None:
    """Reconciles the day's invoices with the payment provider's settlement report, then mails
    the differences to finance. Its second sentence is left out.
    """


@job("tests.cli_long_summary")
def cli_long_summary(ctx: JobContext) -> None:
    """Walks every warehouse of every region and every shelf of every aisle of each of them,
    counting the boxes, the pallets and the crates it finds there, e.g. the empty ones too,
    and stores the totals.
    """
