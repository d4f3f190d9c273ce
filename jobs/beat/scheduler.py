"""``ClusterScheduler``: the beat scheduler that may run on every server at once.

More in docs/architecture.md, "Module notes".
"""

from __future__ import annotations

import gc
import heapq
import itertools
import json
import logging
import time
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from celery.beat import Scheduler
from django.db import DatabaseError, connection
from django.utils import timezone
from django_celery_beat.models import (
    ClockedSchedule,
    CrontabSchedule,
    IntervalSchedule,
    PeriodicTask,
    SolarSchedule,
)

from jobs.alerts.sender import AlertSender
from jobs.beat import (
    adoption,
    changelog,
    coalescing,
    configured,
    entries,
    pause_ends,
    retiring,
    schedule_errors,
    slot_records,
)
from jobs.beat.clock import DatabaseClock
from jobs.beat.graceful_stop import stop_after_tick
from jobs.beat.heartbeat import beat_recorder, timed_beat_tick
from jobs.beat.uncertain_slots import UncertainSlots
from jobs.broker.dispatch import Publishing, is_burst, publishing
from jobs.conf import get_conf
from jobs.database import connection_budget
from jobs.database.database_clock import database_now
from jobs.guard import reconnect, run_records
from jobs.models import Job, RunStatus, job_from_columns
from jobs.schedule import calendars, catchup, slots
from jobs.schedule.kinds import Schedule
from jobs.upkeep.maintenance import MaintenanceLoop

log = logging.getLogger(__name__)

Clock = Callable[[], datetime]

# After a database error, how long beat waits before its next try.
ERROR_BACKOFF_SECONDS = 1.0
# More edits than this between two ticks: reload every job rather than these one by one.
CHANGE_BATCH = 5_000
# Slots inserted (and then published) per statement when many are due at once.
PUBLISH_CHUNK = 500
_BEGINNING = datetime.min.replace(tzinfo=UTC)
_END = datetime.max.replace(tzinfo=UTC)

# The job columns a beat keeps: what publishing a run reads, and the catch-up inputs, in the
# model's field order (``Job.from_db`` builds the job from them without a query). The schedule
# itself is decoded by ``beat_link`` from the beat entry's schedule rows.
_KEPT = {
    "id", "name", "task", "queue", "priority", "soft_time_limit", "time_limit",
    "start_deadline", "catch_up", "updated_at", "exchange", "routing_key", "coalesce",
    "business_days_only", "holiday_calendar", "active_from", "active_until", "adopted",
    "headers", "expires_at", "one_off",
}  # fmt: skip
_JOB_COLUMNS = tuple(f.attname for f in Job._meta.concrete_fields if f.attname in _KEPT)
_LOAD = f"""
SELECT {", ".join("j." + column for column in _JOB_COLUMNS)},
       t.id, t.start_time, t.interval_id, t.crontab_id, t.clocked_id, t.solar_id
  FROM jobs_job AS j LEFT JOIN django_celery_beat_periodictask AS t ON t.id = j.periodic_task_id
 WHERE j.kind = 'periodic' AND j.enabled
"""
_ID, _NAME, _START_DEADLINE, _CATCH_UP, _UPDATED_AT = (
    _JOB_COLUMNS.index(name) for name in ("id", "name", "start_deadline", "catch_up", "updated_at")
)
_JOB_WIDTH = len(_JOB_COLUMNS)
_HEADERS = _JOB_COLUMNS.index("headers")  # JSON text as read (psycopg hands Django jsonb as text)


def system_clock(offset_seconds: float = 0.0) -> Clock:
    """The machine's clock, shifted by ``offset_seconds`` (``JOBS_BEAT_TEST_CLOCK_OFFSET``, a
    skew for tests, which ``DatabaseClock`` measures and cancels like a real one)."""
    if not offset_seconds:
        return timezone.now
    offset = timedelta(seconds=offset_seconds)
    return lambda: timezone.now() + offset


@dataclass
class _Entry:
    """One job as this beat schedules it."""

    columns: tuple[Any, ...]  # the job's _JOB_COLUMNS
    schedule: Schedule
    due: datetime | None  # the next slot this beat will fire
    generation: int  # heap items of older generations are stale
    _job: Job | None = field(default=None, repr=False)

    @property
    def job_id(self) -> int:
        return int(self.columns[_ID])

    @property
    def start_deadline(self) -> int:
        return int(self.columns[_START_DEADLINE])

    def is_active(self, slot: datetime) -> bool:
        """Whether ``slot`` lies in the job's active period (jobs.schedule.calendars), before
        it expired."""
        job = self.job
        active = calendars.is_active(slot, job.active_from, job.active_until)
        return active and not job.expired(slot)

    @property
    def job(self) -> Job:
        """The job for publishing; built once, without a query."""
        if self._job is None:
            self._job = job_from_columns(_JOB_COLUMNS, self.columns)
        return self._job


@contextmanager
def _collector_paused(paused: bool) -> Iterator[None]:
    """Python's cyclic garbage collector off for the block when ``paused``. A burst makes a
    dozen objects a run (its row, its job, its message), and each pass of the collector over
    the oldest generation walks every object the beat holds (an entry per job). Measured on a
    10k burst's tick on RabbitMQ, alternated: 1.76 and 1.78 s with the collector on, 1.57 and
    1.66 s paused (medians of 3). Reference counting still frees what the tick drops; cycles
    wait for the collector's next pass after the block."""
    if not paused or not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


class ClusterScheduler(Scheduler):
    """A celery beat scheduler for ``Job`` rows; safe to run on several servers at once.

    ``clock`` replaces the machine's clock (tests), and ``maintain=False`` leaves maintenance
    to other beats. ``tick_at(now)`` runs one tick as if the clock read ``now``.
    """

    def __init__(
        self, *args: Any, clock: Clock | None = None, maintain: bool = True, **kwargs: Any
    ) -> None:
        # A beat keeps a connection per thread (tick, maintenance, alerts): no pool.
        connection_budget.refuse_pool("celery beat")
        conf = get_conf()
        # Fire by the database's clock, not the machine's (see jobs.beat.clock).
        self._clock = clock or DatabaseClock(system_clock(conf.beat_test_clock_offset))
        self._max_sleep = conf.beat_max_interval
        self._entries: dict[int, _Entry] = {}
        self._heap: list[tuple[datetime, int, int]] = []
        self._generations = itertools.count()
        self._position = 0  # the newest schedule change applied
        self._last_read = 0.0  # monotonic time of the last change-log read
        self._started = False
        self._set_aside: dict[int, str] = {}  # job id -> why no slot can be computed
        self._uncertain = UncertainSlots()  # slots whose insert may have committed unseen
        self._errors_to_write: dict[int, str] = {}
        self._next_pause_end: datetime | None = None  # the soonest pause to end (pause_ends)
        # Pause ends are read again only when a job changed (a pause or its end is a change,
        # logged like any edit) or the soonest end came: not one more statement every tick.
        self._pause_ends_read = False
        self._maintenance = (
            MaintenanceLoop(conf.maintenance_interval, conf.republish_after) if maintain else None
        )
        # Alerts go out from their own thread (and lease): a slow receiver delays no tick and
        # no maintenance pass.
        self._alerts = AlertSender() if maintain else None
        # Before Celery's __init__, which calls setup_schedule.
        self._configuration = configured.BeatConfiguration(beat_recorder())
        super().__init__(*args, **kwargs)
        # The longest sleep is JOBS_BEAT_MAX_INTERVAL whatever Celery passed (--max-interval):
        # set after Celery's __init__, so the banner's "maxinterval" tells the truth.
        self.max_interval = self._max_sleep  # type: ignore[assignment]  # typed int in stubs

    # --- celery.beat.Scheduler interface --------------------------------------------------
    def setup_schedule(self) -> None:
        try:
            self._start(self._clock())
        except DatabaseError:
            log.exception("beat could not load jobs; will retry", extra={"action": "beat_load"})
            connection.close()
        except Exception:
            log.exception("beat could not load jobs; will retry", extra={"action": "beat_load"})

    @timed_beat_tick  # the beat's heartbeat and tick cost, for /healthz and /metrics
    def tick(self, *args: Any, **kwargs: Any) -> float:
        if self._maintenance is not None and not self._maintenance.started:
            self._maintenance.start(self.app)
        if self._alerts is not None and not self._alerts.started:
            self._alerts.start()
        try:
            with stop_after_tick():  # a stop asked for mid-tick waits for its publishes
                return self.tick_at(self._clock())
        except DatabaseError:
            log.exception("beat tick failed; will retry", extra={"action": "beat_tick_error"})
            connection.close()
            return ERROR_BACKOFF_SECONDS
        except Exception:
            # One job's row is set aside where it is read (``_set_aside``); anything else that
            # escapes is a bug, and a beat that exits on it would stop every job's schedule.
            log.exception("beat tick failed; will retry", extra={"action": "beat_tick_bug"})
            return ERROR_BACKOFF_SECONDS

    def sync(self) -> None:
        """Nothing to persist: slots are derived from the schedule, not from beat state."""

    def close(self) -> None:
        if self._maintenance is not None:
            self._maintenance.stop()
        if self._alerts is not None:
            self._alerts.stop()
        super().close()

    @property
    def info(self) -> str:
        return "    . cluster scheduler: one run per slot across every beat (jobs.beat.scheduler)"

    # --- the loop ---------------------------------------------------------------------------
    def tick_at(self, now: datetime) -> float:
        """One tick at beat time ``now``: apply edits, fire what is due; seconds to sleep."""
        if not self._started:
            self._start(now)
        else:
            self._configuration.recheck()
            self._apply_changes(now)
        # Resumed here, their slots come with the next tick's changes, as after any resume.
        due = self._next_pause_end is not None and self._next_pause_end <= now
        if due or not self._pause_ends_read:
            self._next_pause_end = pause_ends.resume_ended(now).next_end
            self._pause_ends_read = True
        fire: list[tuple[_Entry, datetime]] = []
        behind: list[tuple[_Entry, datetime]] = []
        popped: dict[int, tuple[_Entry, datetime]] = {}  # each entry's first slot popped
        while self._heap and self._heap[0][0] <= now:
            when, job_id, generation = heapq.heappop(self._heap)
            entry = self._entries.get(job_id)
            if entry is None or entry.generation != generation:
                continue  # superseded by an edit
            popped.setdefault(job_id, (entry, when))
            if now - when > timedelta(seconds=entry.start_deadline):
                behind.append((entry, when))
                continue
            fire.append((entry, when))
            self._schedule_after(entry, when)
        try:
            missed: list[tuple[int, datetime, str]] = []
            if behind:
                # This beat stalled past the deadline: the catch-up policy decides, by the
                # database clock, for every slot from the one it should have fired on.
                reference = min(now, database_now())
                for entry, when in behind:
                    if reference - when <= timedelta(seconds=entry.start_deadline):
                        # Late only by this beat's clock, which runs ahead: fire as usual.
                        fire.append((entry, when))
                        self._schedule_after(entry, when)
                        continue
                    decided = self._catch_up(entry, when - _TINY, reference, catchup.FELL_BEHIND)
                    fire.extend(decided[0])
                    missed.extend(decided[1])
            self._record(fire, missed)
            self._uncertain.forget_older_than(now)
            self._write_errors()
        except DatabaseError:
            # Nothing of this tick may be lost: the next tick starts again from these slots
            # (re-inserting what did get in is a no-op).
            for entry, when in popped.values():
                if self._entries.get(entry.job_id) is entry:
                    self._schedule(entry, when)
            raise
        return self._sleep()

    def _sleep(self) -> float:
        while self._heap and self._is_stale(self._heap[0]):
            heapq.heappop(self._heap)
        wake = [self._heap[0][0]] if self._heap else []
        if self._next_pause_end is not None:
            wake.append(self._next_pause_end)  # a pause's end is due no later than a slot
        if not wake:
            return self._max_sleep
        until_next = (min(wake) - self._clock()).total_seconds()
        return max(0.0, min(until_next, self._max_sleep))

    def _is_stale(self, item: tuple[datetime, int, int]) -> bool:
        entry = self._entries.get(item[1])
        return entry is None or entry.generation != item[2]

    def _schedule(self, entry: _Entry, due: datetime | None) -> None:
        entry.due = due
        if due is not None:
            heapq.heappush(self._heap, (due, entry.job_id, entry.generation))

    def _schedule_after(self, entry: _Entry, slot: datetime) -> None:
        try:
            following = slots.next_slot(entry.schedule, slot)
        except Exception as exc:
            self._put_aside(entry.job_id, str(entry.columns[_NAME]), exc)
            return
        self._schedule(entry, following)

    # --- jobs that cannot be scheduled --------------------------------------------------------
    def _put_aside(self, job_id: int, name: str, exc: Exception) -> None:
        """Stop scheduling one job whose slots cannot be computed, and say why. The others keep
        their slots; the job is read again at its next edit (the change log names it)."""
        error = schedule_errors.describe(exc)
        log.error(
            "job %s cannot be scheduled, set aside until it is edited: %s",
            name,
            error,
            exc_info=not isinstance(exc, ValueError | OverflowError),
            extra={"action": "schedule_error", "job": name},
        )
        self._entries.pop(job_id, None)
        self._set_aside[job_id] = error
        self._errors_to_write[job_id] = error

    def _write_errors(self) -> None:
        errors, self._errors_to_write = self._errors_to_write, {}
        try:
            schedule_errors.record(errors, beat_recorder().name)
        except DatabaseError:
            self._errors_to_write = {**errors, **self._errors_to_write}
            raise

    def _catch_up(
        self, entry: _Entry, after: datetime, reference: datetime, why: str
    ) -> tuple[list[tuple[_Entry, datetime]], list[tuple[int, datetime, str]]]:
        try:
            decided = catchup.plan(
                entry.schedule,
                after=after,
                now=reference,
                policy=str(entry.columns[_CATCH_UP]),
                start_deadline=entry.start_deadline,
                why=why,
            )
            following = slots.next_slot(entry.schedule, decided.handled_until)
        except Exception as exc:
            self._put_aside(entry.job_id, str(entry.columns[_NAME]), exc)
            return [], []
        self._schedule(entry, following)
        fire = [(entry, decided.run)] if decided.run is not None else []
        return fire, [(entry.job_id, slot, reason) for slot, reason in decided.missed]

    def _record(
        self, fire: Sequence[tuple[_Entry, datetime]], missed: Sequence[tuple[int, datetime, str]]
    ) -> None:
        with _collector_paused(is_burst(len(fire))):
            self._record_now(fire, missed)

    def _record_now(
        self, fire: Sequence[tuple[_Entry, datetime]], missed: Sequence[tuple[int, datetime, str]]
    ) -> None:
        fire, reasons = self._apply_calendars(fire)
        missed = [
            (job_id, slot, why)
            for job_id, slot, why in missed
            if job_id in self._entries and self._entries[job_id].is_active(slot)
        ]
        if missed:
            recorded = slot_records.insert_missed(missed)
            log.warning(
                "beat recorded %d slot(s) missed (%d already on record)",
                len(recorded),
                len(missed) - len(recorded),
                extra={"action": "catch_up_missed"},
            )
        if not fire:
            return
        # Every beat walks the due slots in the same order, a chunk at a time: insert, then
        # publish what it won. While one beat publishes a chunk, another beat wins the next
        # one, so a burst of slots spreads over the beats with no coordination; and a beat that
        # dies mid-burst strands at most one chunk (maintenance re-publishes it).
        ordered = sorted(fire, key=lambda item: (item[1], item[0].job_id))
        once = [item for item in ordered if item[0].job.one_off]
        if once:
            ordered = [item for item in ordered if not item[0].job.one_off]
        created = 0
        with publishing(self.producer, schedule_of=self._schedule_of) as publisher:
            created += self._record_one_offs(once, reasons, publisher)
            for start in range(0, len(ordered), PUBLISH_CHUNK):
                chunk = ordered[start : start + PUBLISH_CHUNK]
                pairs = [(entry.job_id, slot) for entry, slot in chunk]
                try:
                    won = slot_records.insert_scheduled(
                        pairs, reasons=[reasons[entry.job_id, slot] for entry, slot in chunk]
                    )
                except reconnect.CONNECTION_ERRORS:
                    self._uncertain.add(pairs)  # it may have committed: see uncertain_slots
                    raise
                by_id = {entry.job_id: entry for entry, _ in chunk}
                created += len(won)
                won = won + self._uncertain.settle(pairs, won)
                # Slots a calendar skipped are recorded (skipped, with why) and not published.
                due = [run for run in won if run.status == RunStatus.SCHEDULED]
                coalesced = coalescing.skip_while_queued(
                    [(run.run_id, run.job_id) for run in due if by_id[run.job_id].job.coalesce]
                )
                publisher.add(
                    (by_id[run.job_id].job, run.run_id, run.scheduled_for)
                    for run in due
                    if run.run_id not in coalesced
                )
        sent = publisher.sent
        self._mark_published(publisher.published)
        log.info(
            "beat fired %d slot(s): %d created here, %d published",
            len(fire),
            created,
            sent,
            extra={"action": "beat_fired"},
        )

    def _schedule_of(self, job: Job) -> Schedule | None:
        entry = self._entries.get(job.pk)
        return entry.schedule if entry is not None else None

    def _mark_published(self, run_ids: list[int]) -> None:
        # Stamped once the messages are out, so that maintenance never counts a run as sent
        # (and missing from its queue) before the queue can hold it. Unstamped, a run is
        # "never sent": maintenance publishes it again after JOBS_REPUBLISH_AFTER, a no-op at
        # the claim; that is no reason to fail the tick.
        try:
            slot_records.mark_published(run_ids)
        except DatabaseError as exc:
            log.warning(
                "could not record %d run(s) published (%s); maintenance will send them again",
                len(run_ids),
                exc,
                extra={"action": "mark_published_failed"},
            )

    def _record_one_offs(
        self,
        once: Sequence[tuple[_Entry, datetime]],
        reasons: dict[tuple[int, datetime], str],
        publisher: Publishing,
    ) -> int:
        """Record (and publish) the slots of one_off jobs, each with the pause that ends its job
        (``retiring.record_one_off_slot``); the number of runs made here."""
        made: list[run_records.NewRun] = []
        for entry, slot in once:
            reason = reasons[entry.job_id, slot]
            try:
                made += retiring.record_one_off_slot(entry.job_id, slot, reason)
            except reconnect.CONNECTION_ERRORS:
                raise  # the tick is tried again
            except Exception as exc:  # e.g. its row, written around validation, cannot be saved
                self._put_aside(entry.job_id, entry.job.name, exc)
                continue
            self._entries.pop(entry.job_id, None)  # its first slot is recorded, here or not
        by_id = {entry.job_id: entry for entry, _ in once}
        publisher.add(
            (by_id[run.job_id].job, run.run_id, run.scheduled_for)
            for run in made
            if run.status == RunStatus.SCHEDULED
        )
        return len(made)

    def _apply_calendars(
        self, fire: Sequence[tuple[_Entry, datetime]]
    ) -> tuple[list[tuple[_Entry, datetime]], dict[tuple[int, datetime], str]]:
        """The slots to record, without those outside their job's active period, each with the
        reason its calendar skips it ("" when it runs). A job whose calendar cannot be read (a
        row written around validation) is set aside, its slots not recorded."""
        kept: list[tuple[_Entry, datetime]] = []
        reasons: dict[tuple[int, datetime], str] = {}
        for entry, slot in fire:
            job = entry.job
            try:
                decided = calendars.verdict(slot, job, zone=calendars.time_zone_of(entry.schedule))
            except Exception as exc:
                self._put_aside(entry.job_id, job.name, exc)
                continue
            if decided.scheduled:
                kept.append((entry, slot))
                reasons[entry.job_id, slot] = decided.reason
        return kept, reasons

    # --- loading jobs -----------------------------------------------------------------------
    def _start(self, now: datetime) -> None:
        """The first load: every job, with catch-up for the slots missed while no beat ran."""
        from jobs.beat.declared_jobs import sync_declared_jobs

        sync_declared_jobs()
        # beat_schedule / CELERY_BEAT_SCHEDULE / add_periodic_task entries become jobs.
        self._configuration.start(self.app)
        position = changelog.newest_id()  # before reading jobs: later edits are read again
        # django-celery-beat entries without a job become jobs, and adopted jobs take the
        # edits made to their entries while no beat ran.
        adoption.adopt()
        unsyncable = adoption.sync()
        rows = [row for row in self._read_jobs() if row[_ID] not in unsyncable]
        db_now, newest = slot_records.newest_slots([row[_ID] for row in rows])
        # The database clock is the cluster's shared reference: a beat whose clock is ahead
        # must not take slots that have not come yet for missed ones.
        reference = min(now, db_now)
        self._entries, self._heap, self._set_aside = {}, [], {}
        fire: list[tuple[_Entry, datetime]] = []
        missed: list[tuple[int, datetime, str]] = []
        for row, schedule in self._with_schedules(rows):
            entry = _Entry(row, schedule, None, next(self._generations))
            self._entries[entry.job_id] = entry
            last = newest.get(entry.job_id)
            if schedule.once:
                after = last or _BEGINNING  # a one-off is owed once, whenever it was edited
            else:
                # Slots before the job's last edit (creation, resume, new schedule) are not
                # owed; nor are those up to its newest run.
                after = max(last or _BEGINNING, row[_UPDATED_AT])
            # An edit or a run "later than now" (a clock ahead of the database's): nothing is
            # owed, and the first slot is the next one.
            after = min(after, reference)
            decided = self._catch_up(entry, after, reference, catchup.NO_BEAT)
            fire.extend(decided[0])
            missed.extend(decided[1])
        self._put_aside_unsyncable(unsyncable)
        log.info("beat loaded %d job(s)", len(self._entries), extra={"action": "beat_loaded"})
        self._record(fire, missed)  # if this fails, the next tick starts over
        schedule_errors.clear_all_but(self._set_aside)
        self._write_errors()
        self._position = position
        self._last_read = time.monotonic()
        self._started = True

    def _apply_changes(self, now: datetime) -> None:
        if time.monotonic() - self._last_read > changelog.RETENTION.total_seconds() / 2:
            # Not read for long (database outage): entries may have been pruned meanwhile.
            self._reload_all(now)
            return
        changes = changelog.read_after(self._position, CHANGE_BATCH)
        self._last_read = time.monotonic()
        if not changes.complete:
            self._reload_all(now)
            return
        if changes.periodic_task_ids:
            # The jobs this makes are logged too: the next tick loads them.
            adoption.adopt(changes.periodic_task_ids)
        if changes.job_ids:
            unsyncable = adoption.sync(changes.job_ids)
            self._reload(changes.job_ids, now)
            self._put_aside_unsyncable(unsyncable)
        self._position = changes.newest_id

    def _reload_all(self, now: datetime) -> None:
        position = changelog.newest_id()
        adoption.adopt()
        unsyncable = adoption.sync()
        self._reload(None, now)
        self._put_aside_unsyncable(unsyncable)
        self._position = position
        self._last_read = time.monotonic()

    def _put_aside_unsyncable(self, unsyncable: dict[int, tuple[str, str]]) -> None:
        """Adopted jobs whose entries were edited into values no job carries: set aside, so
        they do not run on with the values they had before the edit."""
        for job_id, (name, reason) in unsyncable.items():
            self._put_aside(job_id, name, ValueError(reason))
        if unsyncable:
            self._write_errors()

    def _reload(self, job_ids: Collection[int] | None, now: datetime) -> None:
        """Read ``job_ids`` (``None``: every job) again; keep the next slot of a job whose
        schedule did not change."""
        self._pause_ends_read = False  # one of them may have been paused, or resumed
        rows = self._read_jobs(job_ids)
        # A job set aside owes nothing for the time it was broken: its first slot is the
        # next one from now, whenever its last edit was (a fix in SQL leaves updated_at).
        was_aside = set(self._set_aside) if job_ids is None else set(job_ids) & set(self._set_aside)
        for job_id in was_aside:
            del self._set_aside[job_id]
        seen = set()
        for row, schedule in self._with_schedules(rows):
            current = self._entries.get(row[_ID])
            if current is not None and current.schedule == schedule:
                current.columns, current._job = row, None
                seen.add(row[_ID])
                continue
            try:
                edited = now if row[_ID] in was_aside else row[_UPDATED_AT]
                due = _first_due(schedule, edited, now)
            except Exception as exc:
                self._put_aside(row[_ID], row[_NAME], exc)
                continue
            seen.add(row[_ID])
            entry = _Entry(row, schedule, None, next(self._generations))
            self._entries[entry.job_id] = entry
            self._schedule(entry, due)
        if job_ids is None:
            schedule_errors.clear_all_but(self._set_aside)
        else:
            schedule_errors.clear(set(job_ids) - set(self._set_aside))
        self._write_errors()
        gone = (set(self._entries) if job_ids is None else set(job_ids)) - seen
        for job_id in gone:
            self._entries.pop(job_id, None)
        if len(self._heap) > 2 * len(self._entries) + 64:
            self._heap = [item for item in self._heap if not self._is_stale(item)]
            heapq.heapify(self._heap)
        log.info(
            "beat reloaded %d job(s), removed %d",
            len(seen),
            len(gone),
            extra={"action": "beat_reloaded"},
        )

    def _read_jobs(self, job_ids: Collection[int] | None = None) -> list[tuple[Any, ...]]:
        with connection.cursor() as cursor:
            if job_ids is None:
                cursor.execute(_LOAD)
            else:
                cursor.execute(_LOAD + " AND j.id = ANY(%s)", [list(job_ids)])
            return [_decoded(row) for row in cursor.fetchall()]

    def _with_schedules(
        self, rows: Sequence[tuple[Any, ...]]
    ) -> Iterable[tuple[tuple[Any, ...], Schedule]]:
        """Each row's job columns with its schedule, decoded by ``beat_link`` once per distinct
        schedule (thousands of jobs usually share a handful of interval and crontab rows). A
        row whose schedule cannot be decoded is set aside with the reason."""
        intervals = IntervalSchedule.objects.in_bulk({r[_JOB_WIDTH + 2] for r in rows} - {None})
        crontabs = CrontabSchedule.objects.in_bulk({r[_JOB_WIDTH + 3] for r in rows} - {None})
        clocked = ClockedSchedule.objects.in_bulk({r[_JOB_WIDTH + 4] for r in rows} - {None})
        solars = SolarSchedule.objects.in_bulk({r[_JOB_WIDTH + 5] for r in rows} - {None})
        decoded: dict[tuple[Any, ...], Schedule | Exception] = {}
        for row in rows:
            key = (row[_JOB_WIDTH] is not None, *row[_JOB_WIDTH + 1 :])  # not the entry's id
            if key not in decoded:
                decoded[key] = _decode(row[_NAME], key, intervals, crontabs, clocked, solars)
            schedule = decoded[key]
            if isinstance(schedule, Exception):
                self._put_aside(row[_ID], row[_NAME], schedule)
            else:
                yield row[:_JOB_WIDTH], schedule


_TINY = timedelta(microseconds=1)


def _decoded(row: Sequence[Any]) -> tuple[Any, ...]:
    """A job's row as ``Job.from_db`` would hold it: its headers parsed."""
    headers = {} if row[_HEADERS] == "{}" else json.loads(row[_HEADERS])  # "{}": nearly all
    return (*row[:_HEADERS], headers, *row[_HEADERS + 1 :])


def _decode(
    job_name: str,
    key: tuple[Any, ...],
    intervals: dict[Any, IntervalSchedule],
    crontabs: dict[Any, CrontabSchedule],
    clocked: dict[Any, ClockedSchedule],
    solars: dict[Any, SolarSchedule],
) -> Schedule | Exception:
    """The schedule carried by a job's beat entry columns, or why there is none."""
    has_entry, start_time, interval_id, crontab_id, clocked_id, solar_id = key
    if not has_entry:
        return ValueError("the job has no beat entry carrying its schedule")
    entry = PeriodicTask(
        name=entries.beat_entry_name(job_name),
        start_time=start_time,
        interval=intervals.get(interval_id),
        crontab=crontabs.get(crontab_id),
        clocked=clocked.get(clocked_id),
        solar=solars.get(solar_id),
    )
    try:
        schedule = entries.schedule_of(entry)
    except Exception as exc:  # any row, however it was written, fails alone
        return exc
    assert schedule is not None  # an entry was given
    return schedule


def _first_due(schedule: Schedule, edited: datetime, now: datetime) -> datetime | None:
    """The first slot of a job this beat just learnt about (added, resumed, rescheduled): the
    first one after the edit, even if this beat hears of the edit a moment later. A one-off's
    single slot is due whenever it is (past its deadline, the behind path records it missed)."""
    if schedule.once:
        return slots.latest_slot(schedule, _END)  # its single slot, whenever it is
    return slots.next_slot(schedule, min(edited, now))
