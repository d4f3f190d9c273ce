"""``manage.py jobs <verb>``: add, inspect and operate jobs from a shell or a script.

Every change goes through ``jobs.services``, like the admin's and the API's, so validation and
the beat entry are the same whichever edge made it. Parsing, error lines and output formats are
in ``jobs.cli``.
"""

from __future__ import annotations

import argparse
import sys
import time
from datetime import timedelta
from typing import Any, NoReturn

from django.core.management.base import (
    BaseCommand,
    CommandError,
    CommandParser,
    DjangoHelpFormatter,
)
from django.db.models import BooleanField, ExpressionWrapper
from django.utils import timezone

from jobs import cli, registry, services
from jobs.alerts import baseline, detect
from jobs.audit import Actor
from jobs.beat import adoption, configured, slot_fates, switch_report
from jobs.continuous.nodes import with_liveness
from jobs.database.database_clock import database_now
from jobs.exceptions import NotFound, NotTriggerable
from jobs.models import (
    JOB_DISPLAY_RELATED,
    LIVE_LEASE,
    MAX_PAUSE_REASON,
    TERMINAL_STATUSES,
    Blackout,
    CatchUp,
    Incident,
    Job,
    JobRun,
    Lease,
    Node,
    OnLost,
    Overlap,
    RunStatus,
    alert_channel_values,
)
from jobs.registry import POLICY_FIELDS
from jobs.runlog import reading
from jobs.schedule.kinds import describe
from jobs.values import serializers
from jobs.values.serializers import duration_words, schedule_words
from jobs.workflow import backfill

VERBS = (
    "add",
    "list",
    "show",
    "run",
    "pause",
    "resume",
    "remove",
    "runs",
    "nodes",
    "leases",
    "tasks",
    "prune",
    "alerts",
    "durations",
    "mute",
    "unmute",
    "incidents",
    "adopt",
    "backfill",
    "upcoming",
    "blackout",
    "after",
    "log",
)

EXIT_STATUS = """\
exit status:
  0  done
  1  runtime error: no job with that name (show, run, backfill, upcoming, pause, resume,
     remove, runs JOB), no run with that id (log)
  2  usage or validation error: an unknown, missing or conflicting flag, a bad value, or a job
     the services reject (unknown task, duplicate name, bad cron or time zone, bad arguments)
Errors are one line on stderr: "jobs VERB: error: FLAG: what is wrong".
Django's common options (--settings, --traceback, -v) go before the verb."""


# How each policy flag of `add` reads its value; the model validates ranges, so the rule for a
# value lives in one place. A policy missing here still works, read as text.
POLICY_ARGUMENTS: dict[str, dict[str, Any]] = {
    "overlap": {"choices": Overlap.values},
    "start_deadline": {"type": cli.duration, "metavar": "DURATION"},
    "catch_up": {"choices": CatchUp.values},
    "on_lost": {"choices": OnLost.values},
    "max_retries": {"type": int, "metavar": "N"},
    "retry_backoff": {"type": cli.duration, "metavar": "DURATION"},
    "soft_time_limit": {"type": cli.duration, "metavar": "DURATION"},
    "time_limit": {"type": cli.duration, "metavar": "DURATION"},
    "lease_ttl": {"type": cli.duration, "metavar": "DURATION"},
    "min_hold": {"type": cli.duration, "metavar": "DURATION"},
    "queue": {"metavar": "QUEUE"},
    "priority": {"type": int, "metavar": "0-9"},
    "max_concurrency": {"type": cli.positive_int, "metavar": "N"},
    "rate_limit_runs": {"type": cli.positive_int, "metavar": "N"},
    "rate_limit_period": {"type": cli.duration, "metavar": "DURATION"},
    "coalesce": {"type": cli.yes_no, "metavar": "yes|no"},
    "business_days_only": {"type": cli.yes_no, "metavar": "yes|no"},
    "holiday_calendar": {"metavar": "CODE"},
    "active_from": {"type": cli.instant, "metavar": "TIME"},
    "active_until": {"type": cli.instant, "metavar": "TIME"},
    "alert_channels": {"choices": alert_channel_values()},
    "alert_reasons": {"type": cli.reasons, "metavar": "REASON,..."},
    "max_duration": {"type": cli.duration, "metavar": "DURATION"},
    "long_run_factor": {"type": cli.number, "metavar": "X"},
    "min_duration": {"type": cli.duration, "metavar": "DURATION"},
    "baseline_alerts": {"type": cli.yes_no, "metavar": "yes|no"},
}


# How often `jobs log --follow` asks for new lines (a running run's are written every second).
LOG_FOLLOW_POLL_SECONDS = 0.25

# How long `jobs run` waits for a live worker's verdict on its run (a claim takes milliseconds).
RUN_WAIT_SECONDS = 2.0


class _HelpFormatter(DjangoHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """Django's option order, with the exit-status table kept as written."""


class Command(BaseCommand):
    help = "Add, list, show, trigger, pause, resume and remove jobs; list runs, nodes, leases."
    missing_args_message = f"give a verb: {', '.join(VERBS)}"

    # --- parser -----------------------------------------------------------------------------
    def create_parser(self, prog_name: str, subcommand: str, **kwargs: Any) -> CommandParser:
        kwargs.setdefault("formatter_class", _HelpFormatter)
        kwargs.setdefault("epilog", EXIT_STATUS)
        parser = super().create_parser(prog_name, subcommand, **kwargs)
        # Django always builds a plain CommandParser. Ours adds no state that this parser
        # lacks, only behaviour: a missing or unknown verb is reported in one line too.
        parser.__class__ = cli.CliParser
        return parser

    def add_arguments(self, parser: CommandParser) -> None:
        verbs = parser.add_subparsers(
            dest="verb", metavar="VERB", required=True, parser_class=cli.CliParser
        )
        self._add_add(verbs)
        self._add_listing(verbs, "list", "List jobs with their schedule and state.")
        show = verbs.add_parser(
            "show",
            verb="show",
            help="Show one job: schedule, policies, arguments; its next slot, last run and "
            "lease holder.",
        )
        show.add_argument("name", metavar="NAME")
        show.add_argument("--json", action="store_true", help="Print a JSON object.")
        for verb, text in (
            (
                "run",
                "Trigger a run now, outside the schedule; prints the new run's id, or what "
                "became of it when a worker settled it at once (e.g. skipped: its lease held).",
            ),
            ("remove", "Delete a job, its beat entry and its run history."),
        ):
            parser = verbs.add_parser(verb, verb=verb, help=text)
            parser.add_argument("name", metavar="NAME")
            if verb == "run":
                parser.add_argument(
                    "--json", action="store_true", help="Print the run as a JSON object."
                )
                parser.add_argument(
                    "--wait", type=cli.seconds, default=RUN_WAIT_SECONDS, metavar="SECONDS",
                    help="How long to wait for a live worker to take or settle the run "
                    f"({RUN_WAIT_SECONDS:g}; 0: do not wait).",
                )  # fmt: skip
                parser.add_argument(
                    "--kwargs",
                    dest="run_kwargs",
                    type=cli.json_value,
                    metavar="JSON",
                    help="JSON object: keyword arguments for this run, over the job's own.",
                )
        self._add_pause(verbs)
        text = (
            "Make the runs of the past slots in a range that have none, one per slot as the "
            "beats would; they run one at a time, oldest first."
        )
        fill = verbs.add_parser("backfill", verb="backfill", help=text, description=text)
        fill.add_argument("name", metavar="NAME")
        for bound in ("since", "until"):
            fill.add_argument(
                f"--{bound}", required=True, type=cli.instant, metavar="TIME",
                help="ISO 8601, e.g. 2030-01-01T00:00:00Z (UTC if no offset); inclusive.",
            )  # fmt: skip
        fill.add_argument(
            "--max-runs", type=cli.positive_int, default=backfill.DEFAULT_MAX_RUNS, metavar="N",
            help=f"Refuse a range with more than N slots to fill ({backfill.DEFAULT_MAX_RUNS:,}).",
        )  # fmt: skip
        fill.add_argument(
            "--dry-run", action="store_true",
            help="Make nothing: list each slot it would fill and that run's fate.",
        )  # fmt: skip
        fill.add_argument("--json", action="store_true", help="Print a JSON object.")
        text = (
            "List the job's next slots and what the beats make of each: it runs; it is skipped "
            "by a blackout window or its calendar (weekends, holidays); no run (outside its "
            "active period, expired, paused); and the DST changes each crosses."
        )
        upcoming = verbs.add_parser("upcoming", verb="upcoming", help=text, description=text)
        upcoming.add_argument("name", metavar="NAME")
        upcoming.add_argument(
            "--count", type=cli.count_up_to(slot_fates.MAX_COUNT),
            default=slot_fates.DEFAULT_COUNT, metavar="N",
            help=f"How many slots ({slot_fates.DEFAULT_COUNT}; at most "
            f"{slot_fates.MAX_COUNT:,}).",
        )  # fmt: skip
        upcoming.add_argument(
            "--since", type=cli.instant, metavar="WHEN",
            help="From this instant on (ISO 8601, UTC if no offset; default: now).",
        )  # fmt: skip
        upcoming.add_argument("--json", action="store_true", help="Print a JSON object.")
        text = "Show or set the jobs a job runs after (its upstreams)."
        after = verbs.add_parser("after", verb="after", help=text, description=text)
        after.add_argument("name", metavar="NAME")
        change = after.add_mutually_exclusive_group()
        change.add_argument(
            "--set", dest="upstreams", type=cli.names, metavar="JOB,...",
            help="Run once per slot for which all of these jobs succeeded.",
        )  # fmt: skip
        change.add_argument("--clear", action="store_true", help="Run after no job.")
        text = "Blackout windows: the slots inside are recorded skipped with the window's name."
        blackout = verbs.add_parser("blackout", verb="blackout", help=text, description=text)
        actions = blackout.add_subparsers(
            dest="blackout_action", metavar="ACTION", required=True, parser_class=cli.CliParser
        )
        add_window = actions.add_parser("add", verb="blackout add", help="Add a window.")
        add_window.add_argument("window", metavar="NAME")
        add_window.add_argument(
            "--from", dest="starts_at", required=True, type=cli.instant, metavar="TIME",
            help="The first instant frozen (ISO 8601; UTC if no offset).",
        )  # fmt: skip
        add_window.add_argument(
            "--until", dest="ends_at", required=True, type=cli.instant, metavar="TIME",
            help="The first instant no longer frozen.",
        )  # fmt: skip
        add_window.add_argument("--job", metavar="JOB", help="Only this job (default: every job).")
        add_window.add_argument("--description", default="", metavar="TEXT", help="Why.")
        listing = actions.add_parser("list", verb="blackout list", help="List the windows.")
        listing.add_argument("--json", action="store_true", help="Print a JSON list.")
        remove_window = actions.add_parser("remove", verb="blackout remove", help="Remove one.")
        remove_window.add_argument("window", metavar="NAME")
        runs = self._add_listing(verbs, "runs", "List runs, newest slot first.")
        runs.add_argument("job", metavar="JOB", nargs="?", help="Only the runs of this job.")
        runs.add_argument("--status", choices=RunStatus.values, help="Only runs in this state.")
        runs.add_argument(
            "--limit", type=cli.positive_int, default=50, metavar="N", help="At most N (50)."
        )
        self._add_listing(verbs, "nodes", "List worker nodes and their last heartbeat.")
        self._add_listing(verbs, "leases", "List leases; LIVE is by the database clock.")
        self._add_listing(
            verbs,
            "tasks",
            "List what a job may run: @job functions (with their declared schedule) and the "
            "project's Celery tasks.",
        )
        # History retention (jobs.upkeep.retention).
        prune = verbs.add_parser(
            "prune", verb="prune", help="Delete finished runs older than JOBS_RETENTION_<STATUS>."
        )
        prune.add_argument("--dry-run", action="store_true", help="Only count what would go.")
        prune.add_argument("--json", action="store_true", help="Print a JSON object.")
        alerts = verbs.add_parser(
            "alerts",
            verb="alerts",
            help="Show or set where a job's incidents are notified and for which reasons.",
        )
        alerts.add_argument("name", metavar="NAME")
        alerts.add_argument("--channels", **POLICY_ARGUMENTS["alert_channels"])
        alerts.add_argument("--reasons", **POLICY_ARGUMENTS["alert_reasons"])
        durations = verbs.add_parser(
            "durations",
            verb="durations",
            help="Show a job's duration baseline and what judges its runs running long or too "
            "short; or change that (none: clear a limit).",
        )
        durations.add_argument("name", metavar="NAME")
        for field in services.DURATION_FIELDS:
            argument = POLICY_ARGUMENTS[field]
            clearable = field != "baseline_alerts"
            durations.add_argument(
                cli.policy_flag(field),
                dest=field,
                type=cli.or_none(argument["type"]) if clearable else argument["type"],
                metavar=argument["metavar"] + ("|none" if clearable else ""),
            )
        mute = verbs.add_parser(
            "mute",
            verb="mute",
            help="Mute a job's alerts for a while (its incidents still open and show).",
        )
        mute.add_argument("name", metavar="NAME")
        mute.add_argument(
            "--for", dest="for_", required=True, type=cli.duration, metavar="DURATION",
            help="How long, e.g. 2h or 30m.",
        )  # fmt: skip
        verbs.add_parser("unmute", verb="unmute", help="Alert again for a muted job.").add_argument(
            "name", metavar="NAME"
        )
        incidents = self._add_listing(
            verbs, "incidents", "List incidents, newest first (open ones only with --open)."
        )
        incidents.add_argument("job", metavar="JOB", nargs="?", help="Only this job's.")
        incidents.add_argument("--open", action="store_true", help="Only open incidents.")

        # A run's own log (jobs.runlog).
        text = (
            "Print a run's own log: what its code logged (at the job's level) and printed while "
            "it ran, each line with its time and level; a note says how many lines were cut "
            "where the run's bounds (JOBS_RUN_LOG_MAX_LINES) cut them. With --follow, print the "
            "lines of a running run as they come, until it ends."
        )
        run_log = verbs.add_parser("log", verb="log", help=text, description=text)
        run_log.add_argument("run_id", metavar="RUN_ID", type=cli.run_id, help="The run's id.")
        run_log.add_argument(
            "--follow", action="store_true", help="Keep printing new lines until the run ends."
        )
        run_log.add_argument(
            "--json", action="store_true", help="Print one JSON object per line (JSON Lines)."
        )

        # Celery's configuration and django-celery-beat entries without a job
        # (jobs.beat.configured, jobs.beat.adoption, jobs.beat.switch_report)
        text = (
            "Make jobs of the periodic tasks the project declares for Celery: its beat_schedule "
            "(CELERY_BEAT_SCHEDULE, add_periodic_task) and the enabled django-celery-beat "
            "entries that no job owns (beats do it at start and on every edit). With --dry-run "
            "(the pre-switch report), change nothing: list every periodic task from all three "
            "sources, the job it becomes, its next slots as Celery computes them and as the "
            "cluster will, and what changes or cannot be carried over."
        )
        adopt = verbs.add_parser("adopt", verb="adopt", help=text, description=text)
        adopt.add_argument("--dry-run", action="store_true", help="Adopt nothing, only say.")
        adopt.add_argument("--json", action="store_true", help="Print a JSON list.")

    def _add_listing(self, verbs: Any, verb: str, text: str) -> CommandParser:
        parser: CommandParser = verbs.add_parser(verb, verb=verb, help=text, description=text)
        parser.add_argument("--json", action="store_true", help="Print a JSON list.")
        return parser

    def _add_pause(self, verbs: Any) -> None:
        for verb, text in (
            (
                "pause",
                "Pause a job, or every running job a --queue and/or a --match chooses: no new "
                "slots until it is resumed (by hand, or by the beats at --until).",
            ),
            (
                "resume",
                "Resume a paused job, or every paused job a --queue and/or a --match chooses.",
            ),
        ):
            parser = verbs.add_parser(verb, verb=verb, help=text, description=text)
            parser.add_argument("name", metavar="NAME", nargs="?", help="The job.")
            parser.add_argument("--queue", metavar="Q", help="Every job on this queue.")
            parser.add_argument(
                "--match", metavar="PATTERN",
                help="Every job whose name matches this shell pattern, e.g. 'billing.*'.",
            )  # fmt: skip
            if verb == "pause":
                parser.add_argument(
                    "--reason", metavar="TEXT",
                    help=f"Why, shown in the job list (one line, at most {MAX_PAUSE_REASON}).",
                )  # fmt: skip
                parser.add_argument(
                    "--until", metavar="WHEN",
                    help="Resume by itself then: an ISO 8601 time (UTC if no offset) or a "
                    "duration from now such as 2h or 1d12h.",
                )  # fmt: skip

    def _add_add(self, verbs: Any) -> None:
        add: CommandParser = verbs.add_parser(
            "add",
            verb="add",
            help="Add a job: a registered task, one schedule, and policies.",
            description="Add a job. Durations: 30s, 5m, 1h30m, 2d (whole seconds).",
        )
        add.add_argument("name", metavar="NAME", help="Unique job name.")
        add.add_argument(
            "--task", required=True, help="A @job function or Celery task (see `tasks`)."
        )
        schedule = add.add_mutually_exclusive_group(required=True)
        schedule.add_argument(
            "--every", type=cli.interval, metavar="DURATION", help="Every interval, e.g. 10s."
        )
        schedule.add_argument(
            "--cron", type=cli.cron, metavar='"M H DOM MON DOW"', help="Five cron fields."
        )
        schedule.add_argument("--at", type=cli.instant, metavar="ISO", help="Once, at this time.")
        schedule.add_argument("--continuous", action="store_true", help="Always on one node.")
        schedule.add_argument(
            "--triggered",
            action="store_true",
            help="No schedule of its own: after its upstreams (--after), run now, the API.",
        )
        add.add_argument(
            "--after", type=cli.names, default=[], metavar="JOB,...",
            help="Run once per slot for which all of these jobs succeeded.",
        )  # fmt: skip
        add.add_argument("--tz", type=cli.timezone_name, help="Time zone of --cron (UTC).")
        # Not dest "args": Django takes that option for the command's positional arguments.
        add.add_argument(
            "--args", dest="job_args", type=cli.json_value, metavar="JSON", help="A JSON list."
        )
        add.add_argument(
            "--kwargs", dest="job_kwargs", type=cli.json_value, metavar="JSON", help="JSON object."
        )
        add.add_argument("--paused", action="store_true", help="Add it paused.")
        for model_field in Job._meta.fields:
            if model_field.name not in POLICY_FIELDS:
                continue
            default = model_field.get_default() if model_field.has_default() else None
            suffix = "" if default is None else f" (default: {default})"
            add.add_argument(
                cli.policy_flag(model_field.name),
                help=f"{model_field.help_text}{suffix}",
                **POLICY_ARGUMENTS.get(model_field.name, {}),
            )

    # --- errors -----------------------------------------------------------------------------
    def run_from_argv(self, argv: list[str]) -> None:
        try:
            super().run_from_argv(argv)
        except cli.ParseError as exc:
            # Django parses outside its own error handler; parse errors come out here.
            self._exit(exc)

    def execute(self, *args: Any, **options: Any) -> str | None:
        try:
            return super().execute(*args, **options)
        except CommandError as exc:
            # Django would print "CommandError: ..."; the contract is the bare line.
            if getattr(self, "_called_from_command_line", False) and not options.get("traceback"):
                self._exit(exc)
            raise

    def _exit(self, exc: CommandError) -> NoReturn:
        self.stderr.write(str(exc))
        sys.exit(exc.returncode)

    # --- verbs ------------------------------------------------------------------------------
    def handle(self, *args: Any, **options: Any) -> None:
        verb = options["verb"]
        handler = getattr(self, f"_verb_{verb}")
        try:
            handler(options)
        except (NotFound, NotTriggerable) as exc:
            raise cli.CliError(verb, str(exc), returncode=cli.RUNTIME) from None

    def _verb_add(self, options: dict[str, Any]) -> None:
        # The API's POST /api/jobs reads the same names through the same services.
        values = {name: options[name] for name in services.DEFINITION_FIELDS if name in options}
        values.update(args=options["job_args"], kwargs=options["job_kwargs"])
        values.update({name: options[name] for name in POLICY_FIELDS})
        with cli.validated("add"):
            definition = services.definition_from(values)
            job = services.create_job(definition, actor=Actor.cli())
        state = "" if job.enabled else ", paused"
        self.stdout.write(f"added job {job.name}: {describe(definition.schedule)}{state}")

    def _verb_list(self, options: dict[str, Any]) -> None:
        jobs = list(
            Job.objects.select_related(*JOB_DISPLAY_RELATED).prefetch_related(
                "upstreams", "downstreams"
            )
        )
        if options["json"]:
            self._json([cli.job_record(job) for job in jobs])
            return
        rows = [
            (
                job.name,
                job.task,
                schedule_words(job),
                _state(job),
                job.overlap,
                job.queue,
            )
            for job in jobs
        ]
        self._table(("NAME", "TASK", "SCHEDULE", "STATE", "OVERLAP", "QUEUE"), rows, "jobs")

    def _verb_show(self, options: dict[str, Any]) -> None:
        job = services.get_job(options["name"])
        now_record, now_lines = cli.job_now(job, timezone.now())
        record = {**cli.job_record(job), **now_record}
        if options["json"]:
            self._json(record)
            return
        for key in ("args", "kwargs"):
            record[key] = cli.to_json(record[key], indent=None)
        record.update(now_lines)
        width = max(len(key) for key in record)
        for key, value in record.items():
            self.stdout.write(f"{key.ljust(width)}  {cli.cell(value)}")

    def _verb_run(self, options: dict[str, Any]) -> None:
        # A broker outage is logged, not raised: the run is recorded and stays scheduled.
        with cli.validated("run"):
            run = services.run_now(
                options["name"], actor=Actor.cli(), kwargs=options.get("run_kwargs")
            )
        # A worker settles some runs as it receives them (its lease held under overlap skip:
        # skipped; its deadline passed: missed), and then printing only the id would hide that
        # it did not run: wait (briefly, and only if a live node serves its queue) for the
        # worker's verdict.
        run = JobRun.objects.select_related("job").get(pk=run.pk)
        if (
            run.status == RunStatus.SCHEDULED
            and options["wait"]
            and cli.a_worker_serves(run.job.queue)
        ):
            run = cli.awaited_run(run.pk, options["wait"])
        if options["json"]:
            self._json(cli.run_record(run))
            return
        # The id alone on stdout whatever became of the run: scripts read it
        # (`id=$(jobs run NAME)`); what a person needs to know besides goes to stderr.
        self.stdout.write(str(run.pk))
        if run.status in TERMINAL_STATUSES:
            self.stderr.write(cli.run_outcome(run))

    def _verb_backfill(self, options: dict[str, Any]) -> None:
        flags = {"since": "--since", "until": "--until", "max_runs": "--max-runs"}
        with cli.validated("backfill", flags):
            result = services.backfill_job(
                options["name"],
                options["since"],
                options["until"],
                actor=Actor.cli(),
                max_runs=options["max_runs"],
                dry_run=options["dry_run"],
            )
        if options["json"]:
            record = serializers.backfill_record(result)
            self._json({key: cli.jsonable(value) for key, value in record.items()})
            return
        planned = result.plan
        made = f"would make {len(planned.missing)}" if result.dry_run else f"made {result.created}"
        self.stdout.write(
            f"backfill of {planned.job.name} from {cli.cell(planned.since)} to "
            f"{cli.cell(planned.until)}: {made} run(s); {planned.on_record} slot(s) already "
            "have one"
        )
        if result.dry_run and result.fates:
            self.stdout.write(cli.fates_table(result.fates))

    def _verb_upcoming(self, options: dict[str, Any]) -> None:
        job = services.get_job(options["name"])
        since = options["since"] or database_now()  # the beats fire by the database's clock
        flags = {"count": "--count", "since": "--since"}
        with cli.validated("upcoming", flags):
            fates = slot_fates.upcoming(job, since=since, count=options["count"])
        if options["json"]:
            record = {
                "job": job.name,
                "schedule": schedule_words(job),
                "since": since,
                "results": [serializers.fate_record(fate) for fate in fates],
            }
            self._json(cli.jsonable(record))
            return
        self.stdout.write(
            f"next slots of {job.name} ({schedule_words(job)}) from {cli.cell(since)}:"
        )
        self.stdout.write(cli.fates_table(fates) if fates else "no slot to come")

    def _verb_after(self, options: dict[str, Any]) -> None:
        job = services.get_job(options["name"])
        upstreams = [] if options["clear"] else options["upstreams"]
        if upstreams is not None:
            job.managed_by_code = False  # an operator's edit: the declaration stops applying
            with cli.validated("after", {"after": "--set"}):
                job = services.save_job(
                    job, services.definition_of(job), actor=Actor.cli(), after=upstreams
                )
        names = serializers.upstream_names(job)
        self.stdout.write(f"{job.name} runs after: {', '.join(names) or 'no job'}")

    def _verb_blackout(self, options: dict[str, Any]) -> None:
        action = options["blackout_action"]
        if action == "remove":
            services.remove_blackout(options["window"], actor=Actor.cli())
            self.stdout.write(f"removed blackout {options['window']}")
            return
        if action == "list":
            windows = [
                services.blackout_values(window)
                for window in Blackout.objects.select_related("job")
            ]
            if options["json"]:
                self._json(windows)
                return
            rows = [
                (w["name"], w["job"] or "(every job)", w["starts_at"], w["ends_at"])
                for w in windows
            ]
            self._table(("NAME", "JOB", "FROM", "UNTIL"), rows, "blackout windows")
            return
        flags = {
            "name": "NAME", "job": "--job", "starts_at": "--from", "ends_at": "--until",
            "description": "--description",
        }  # fmt: skip
        with cli.validated("blackout add", flags):
            window = services.add_blackout(
                options["window"],
                options["starts_at"],
                options["ends_at"],
                actor=Actor.cli(),
                job_name=options["job"],
                description=options["description"],
            )
        scope = window.job.name if window.job else "every job"
        self.stdout.write(
            f"added blackout {window.name} over {scope} from {cli.cell(window.starts_at)} "
            f"until {cli.cell(window.ends_at)}"
        )

    def _verb_pause(self, options: dict[str, Any]) -> None:
        pause = {"reason": options["reason"], "until": options["until"]}
        with cli.validated("pause", PAUSE_FLAGS):
            if _chooses_many("pause", options):
                selection = {"queue": options["queue"], "match": options["match"]}
                jobs = services.pause_many(**selection, **pause, actor=Actor.cli())
                self._report_many("paused", jobs, "no running job chosen")
                return
            job = services.pause(options["name"], **pause, actor=Actor.cli())
        self.stdout.write(f"paused {_pause_words(job)}")

    def _verb_resume(self, options: dict[str, Any]) -> None:
        with cli.validated("resume", PAUSE_FLAGS):
            if _chooses_many("resume", options):
                selection = {"queue": options["queue"], "match": options["match"]}
                jobs = services.resume_many(**selection, actor=Actor.cli())
                self._report_many("resumed", jobs, "no paused job chosen")
                return
        job = services.resume(options["name"], actor=Actor.cli())
        self.stdout.write(f"resumed {job.name}")

    def _report_many(self, verb: str, jobs: list[Job], none: str) -> None:
        for job in jobs:
            self.stdout.write(f"{verb} {_pause_words(job)}")
        if not jobs:
            self.stdout.write(none)

    def _verb_remove(self, options: dict[str, Any]) -> None:
        services.remove(options["name"], actor=Actor.cli())
        self.stdout.write(f"removed {options['name']}")

    def _verb_alerts(self, options: dict[str, Any]) -> None:
        channels, reasons = options["channels"], options["reasons"]
        if channels is None and reasons is None:
            job = services.get_job(options["name"])
        else:
            flags = {"alert_channels": "--channels", "alert_reasons": "--reasons"}
            with cli.validated("alerts", flags):
                job = services.set_alerts(
                    options["name"], channels=channels, reasons=reasons, actor=Actor.cli()
                )
        muted = job.alerts_muted_until
        self.stdout.write(
            f"{job.name}: channels {job.alert_channels}, "
            f"reasons {', '.join(job.alert_reasons) or 'all'}, "
            f"muted {'until ' + muted.isoformat(timespec='seconds') if muted else 'no'}"
        )

    def _verb_durations(self, options: dict[str, Any]) -> None:
        given = {
            field: None if options[field] == cli.CLEAR else options[field]
            for field in services.DURATION_FIELDS
            if options[field] is not None
        }
        if given:
            flags = {field: cli.policy_flag(field) for field in services.DURATION_FIELDS}
            with cli.validated("durations", flags):
                job = services.set_durations(options["name"], given, actor=Actor.cli())
        else:
            job = services.get_job(options["name"])
        self.stdout.write(_durations_text(job))

    def _verb_mute(self, options: dict[str, Any]) -> None:
        until = database_now() + timedelta(seconds=options["for_"])
        job = services.mute(options["name"], until, actor=Actor.cli())
        self.stdout.write(f"muted {job.name} until {until.isoformat(timespec='seconds')}")

    def _verb_unmute(self, options: dict[str, Any]) -> None:
        job = services.mute(options["name"], None, actor=Actor.cli())
        self.stdout.write(f"unmuted {job.name}")

    def _verb_incidents(self, options: dict[str, Any]) -> None:
        incidents = Incident.objects.select_related("job")
        if options["job"] is not None:
            incidents = incidents.filter(job=services.get_job(options["job"]))
        if options["open"]:
            incidents = incidents.filter(resolved_at__isnull=True)
        selected = list(incidents[:100])
        if options["json"]:
            self._json([cli.incident_record(incident) for incident in selected])
            return
        rows = [
            (
                incident.pk,
                incident.job.name if incident.job else "(cluster)",
                incident.kind,
                incident.reason,
                incident.opened_at,
                incident.resolved_at or "open",
                incident.bad_runs,
            )
            for incident in selected
        ]
        self._table(
            ("ID", "JOB", "KIND", "REASON", "OPENED", "RESOLVED", "BAD RUNS"), rows, "incidents"
        )

    def _verb_runs(self, options: dict[str, Any]) -> None:
        runs = JobRun.objects.select_related("job")
        if options["job"] is not None:
            runs = runs.filter(job=services.get_job(options["job"]))
        if options["status"] is not None:
            runs = runs.filter(status=options["status"])
        selected = list(runs[: options["limit"]])
        if options["json"]:
            self._json([cli.run_record(run) for run in selected])
            return
        rows = [
            (
                run.pk,
                run.job.name,
                run.scheduled_for,
                run.status,
                run.trigger,
                run.attempt,
                run.node,
                run.started_at,
                None if run.duration is None else duration_words(run, f"{run.duration:.1f}s"),
                cli.first_line(run.error),
            )
            for run in selected
        ]
        headers = ("ID", "JOB", "SLOT", "STATUS", "TRIGGER", "ATTEMPT", "NODE", "STARTED")
        self._table((*headers, "DURATION", "ERROR"), rows, "runs")

    def _verb_nodes(self, options: dict[str, Any]) -> None:
        # state: alive, dead (3 missed heartbeats, by the database clock) or stopped.
        nodes = list(with_liveness(Node.objects.all()))
        if options["json"]:
            self._json([{**cli.node_record(node), "state": node.liveness} for node in nodes])
            return
        rows = [
            (
                n.name,
                n.host,
                n.pid,
                n.liveness,
                n.queues,
                n.concurrency,
                n.version,
                n.last_heartbeat,
            )
            for n in nodes
        ]
        headers = ("NAME", "HOST", "PID", "STATE", "QUEUES", "CONCURRENCY", "VERSION")
        self._table((*headers, "LAST HEARTBEAT"), rows, "nodes")

    def _verb_leases(self, options: dict[str, Any]) -> None:
        # Validity by the database clock, as the lease itself is judged (never this node's).
        live = ExpressionWrapper(LIVE_LEASE, output_field=BooleanField())
        leases = list(Lease.objects.annotate(live=live))
        if options["json"]:
            self._json([cli.lease_record(lease) for lease in leases])
            return
        rows = [
            (lease.key, lease.holder, lease.token, lease.acquired_at, lease.expires_at, lease.live)
            for lease in leases
        ]
        headers = ("KEY", "HOLDER", "TOKEN", "ACQUIRED", "EXPIRES", "LIVE")
        self._table(headers, rows, "leases")

    def _verb_tasks(self, options: dict[str, Any]) -> None:
        records = [cli.task_record(spec) for spec in registry.all_specs()]
        if options["json"]:
            self._json(records)
            return
        rows = [(r["name"], r["kind"], r["schedule"], r["summary"]) for r in records]
        self._table(("NAME", "KIND", "SCHEDULE", "SUMMARY"), rows, "registered tasks")

    def _verb_adopt(self, options: dict[str, Any]) -> None:
        configured.import_task_modules()  # as a beat does before reading its schedule
        if options["dry_run"]:
            self._switch_report(options)
            return
        outcome = configured.sync(beat="cli")
        if not outcome.applied:
            self.stdout.write(f"Celery configuration not applied: {outcome.why_not}")
        for entry in outcome.not_carried:
            self.stdout.write(f"{entry.key} ({entry.task}): cannot adopt: {entry.reason}")
        verdicts = adoption.adopt(actor=Actor.cli())
        if options["json"]:
            self._json([verdict.record() for verdict in verdicts])
            return
        if not verdicts:
            self.stdout.write("no django-celery-beat entry without a job")
            return
        for verdict in verdicts:
            said = "adopted" if verdict.adoptable else f"cannot adopt: {verdict.reason}"
            if verdict.adoptable and not verdict.enabled:
                said += " as a paused job (the entry is disabled)"
            self.stdout.write(f"{verdict.name} ({verdict.task}): {said}")

    def _switch_report(self, options: dict[str, Any]) -> None:
        lines = switch_report.report()
        if options["json"]:
            self._json([line.record() for line in lines])
            return
        if not lines:
            self.stdout.write("no periodic task declared: nothing to carry over")
            return
        for line in lines:
            self.stdout.write(f"{line.name} ({line.task}), from the {line.source}:")
            if not line.carried:
                self.stdout.write(f"  cannot be carried over, would not run: {line.reason}")
                continue
            self.stdout.write(f"  becomes job {line.job!r}: {line.schedule}")
            self.stdout.write(f"  next slots, Celery:  {', '.join(line.celery_next) or '-'}")
            self.stdout.write(f"  next slots, cluster: {', '.join(line.our_next) or '-'}")
            for change in line.changes:
                self.stdout.write(f"  changes: {change}")
        carried = sum(line.carried for line in lines)
        self.stdout.write(
            f"{len(lines)} periodic task(s): {carried} carried over, "
            f"{len(lines) - carried} not (dry run: nothing changed)"
        )

    def _verb_prune(self, options: dict[str, Any]) -> None:
        result = services.prune(dry_run=options["dry_run"], actor=Actor.cli())
        if options["json"]:
            self._json(
                {
                    "dry_run": options["dry_run"],
                    "deleted": dict(result.deleted),
                    "cutoffs": {k: v.isoformat() for k, v in result.cutoffs.items()},
                    "beat_heartbeats": result.beat_heartbeats,
                    "incidents": result.incidents,
                }
            )
            return
        verb = "would delete" if options["dry_run"] else "deleted"
        for status, count in result.deleted.items():
            before = cli.cell(result.cutoffs[status])
            self.stdout.write(f"{status}: {verb} {count} run(s) with a slot before {before}")
        self.stdout.write(f"{verb} {result.total} run(s) in all")

    def _verb_log(self, options: dict[str, Any]) -> None:
        cursor = 0
        try:
            while True:
                page = reading.page(options["run_id"], after=cursor)
                for entry in page.entries:
                    line = cli.to_json(entry.record(), indent=None) if options["json"] else None
                    self.stdout.write(line or entry.text())
                self.stdout.flush()
                cursor = page.cursor
                if page.more:
                    continue
                if page.finished or not options["follow"]:
                    break
                time.sleep(LOG_FOLLOW_POLL_SECONDS)
        except KeyboardInterrupt:
            return  # Ctrl-C ends a --follow: what was printed stands
        if options["follow"]:
            self.stderr.write(f"run {page.run_id} {page.status}")

    # --- output -----------------------------------------------------------------------------
    def _json(self, data: object) -> None:
        self.stdout.write(cli.to_json(data))

    def _table(self, headers: tuple[str, ...], rows: list[tuple[Any, ...]], what: str) -> None:
        self.stdout.write(cli.table(headers, rows) if rows else f"no {what}")


# The flags of `jobs pause` and `jobs resume`, to name them when the services refuse a value.
PAUSE_FLAGS = {"reason": "--reason", "until": "--until", "queue": "--queue", "match": "--match"}


def _chooses_many(verb: str, options: dict[str, Any]) -> bool:
    """True for --queue/--match, False for NAME; a usage error for both or neither."""
    many = bool(options["queue"] or options["match"])
    if many == bool(options["name"]):
        raise cli.CliError(verb, "give NAME, or --queue and/or --match (not both)")
    return many


def _pause_words(job: Job) -> str:
    """A job's name and, when paused, why and until when."""
    words = job.name
    if not job.enabled and job.pause_reason:
        words += f": {job.pause_reason}"
    if not job.enabled and job.paused_until is not None:
        words += f" (until {cli.cell(job.paused_until)})"
    return words


def _state(job: Job) -> str:
    state = "enabled" if job.enabled else "paused"
    if not job.enabled and job.paused_by:
        state = f"{state} by {job.paused_by}"
    if not job.enabled and job.paused_until is not None:
        state = f"{state} until {cli.cell(job.paused_until)}"
    if not job.enabled and job.pause_reason:
        state = f"{state}: {job.pause_reason}"
    if job.expired(timezone.now()):
        state = f"{state}, expired"
    return f"{state}, SCHEDULE ERROR" if serializers.schedule_error(job) else state


def _durations_text(job: Job) -> str:
    """``job``'s baseline, what judges its runs, and its settings, a line each."""
    rules, known = detect.duration_rules(job), detect.baseline_of(job)
    long, short = baseline.long_run_limit(rules, known), baseline.short_threshold(rules, known)
    settings = ", ".join(
        f"{field} {cli.cell(getattr(job, field))}" for field in services.DURATION_FIELDS
    )
    return "\n".join(
        [
            f"{job.name}: baseline median {known.median:.3f} s, p95 {known.p95:.3f} s of its "
            f"last {known.samples} successes"
            if known is not None
            else f"{job.name}: no baseline (fewer than {baseline.MIN_SAMPLES} successes)",
            f"running long past {long.seconds:g} s: {long.basis}"
            if long is not None
            else "running long: not judged (no maximum, time limit or baseline)",
            f"too short under {short.seconds:.3g} s: {short.basis}"
            if short is not None
            else "too short: not judged (no minimum, or too few successes)",
            settings,
        ]
    )
