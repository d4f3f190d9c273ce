"""The job functions the CLI tests add jobs of and list (``jobs add``, ``jobs tasks``): a
function with a default argument, and docstrings whose first sentence wraps or is too long."""

from __future__ import annotations

from jobs import job
from jobs.context import JobContext


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
