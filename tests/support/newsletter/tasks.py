"""The newsletter's tasks: plain ``@task`` functions, nothing of the cluster's in them."""

from __future__ import annotations

import os
import time
from pathlib import Path

from django.tasks import task  # type: ignore[import-not-found,unused-ignore]


@task
def count_words(text: str) -> dict[str, int]:
    """Counts the words of an issue, on whichever worker takes it."""
    return {"words": len(text.split()), "pid": os.getpid()}


@task
def render_issue(issue: int, proofs: str) -> str:
    """Renders an issue once its proofs are signed off (a file appears); a long task."""
    while not Path(proofs).exists():
        time.sleep(0.1)
    return f"issue {issue} rendered"
