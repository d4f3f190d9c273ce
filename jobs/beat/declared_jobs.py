"""Jobs declared in code (``@job("x", every=...)``) get their row on migrate and beat start-up.

A declared job's row is created once. While nobody has edited it (``managed_by_code``), later
changes to the declaration update it; once an operator changes its schedule or policies in the
admin or CLI, the row is theirs and the code no longer touches it. Pausing never counts as an
edit, and sync never touches ``enabled``.
"""

from __future__ import annotations

import logging
import os
import socket

from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models.functions import Now

from jobs import registry
from jobs.audit import Actor
from jobs.models import ConfigurationProblem, Job
from jobs.services import JobDefinition, create_job, definition_of, save_job
from jobs.values.serializers import upstream_names

log = logging.getLogger(__name__)

# Who the audit trail says changed a declared job's row.
DECLARATION = Actor.code("declaration")


def sync_declared_jobs() -> list[str]:
    """Create or update the rows of code-declared jobs; returns the names changed."""
    changed = []
    for spec in registry.specs():
        if not spec.declares_job:
            continue
        try:
            if _sync(spec):
                changed.append(spec.name)
        except ValidationError as exc:
            # One declaration the rows refuse (its name reads like an operator's job) must not
            # stop the migrate or the beat that syncs the others: it is shown, not created.
            _refused(spec.name, exc)
    if changed:
        log.info("declared jobs synced: %s", ", ".join(changed), extra={"action": "jobs_synced"})
    return changed


def _sync(spec: registry.JobSpec) -> bool:
    with transaction.atomic():
        job = Job.objects.select_for_update().filter(name=spec.name).first()
        if job is None:
            create_job(
                JobDefinition(
                    name=spec.name,
                    task=spec.name,
                    schedule=spec.schedule,
                    policies=spec.policies,
                    after=spec.after,
                ),
                actor=DECLARATION,
                managed_by_code=True,
            )
            return True
        return job.managed_by_code and _apply_declaration(job, spec)


def _refused(name: str, exc: ValidationError) -> None:
    """Log the refusal and show it on ``/healthz`` (a configuration problem) until it is fixed."""
    message = f"the declared job {name!r} has no row: " + " ".join(exc.messages)
    log.error(message, extra={"action": "declared_job_refused", "job": name})
    ConfigurationProblem.objects.update_or_create(
        cause=f"declared_job:{name}"[:64],
        defaults={
            "message": message,
            "process": f"{socket.gethostname()}:{os.getpid()}",
            "last_seen": Now(),
        },
    )


def _apply_declaration(job: Job, spec: registry.JobSpec) -> bool:
    before = (definition_of(job), _policies(job, spec), upstream_names(job))
    if before == (spec.schedule, spec.policies, sorted(spec.after)):
        return False
    for name, value in spec.policies.items():
        setattr(job, name, value)
    save_job(job, spec.schedule, actor=DECLARATION, after=spec.after)
    return True


def _policies(job: Job, spec: registry.JobSpec) -> dict[str, object]:
    return {name: getattr(job, name) for name in spec.policies}
