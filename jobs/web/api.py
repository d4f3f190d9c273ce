"""The JSON API under ``/api/``: list jobs and runs, add a job (the names of ``jobs add``'s
options), trigger a run (at most once per ``Idempotency-Key``), pause, resume, edit policies
and the schedule, delete a job. Described by ``/api/openapi.json``.

Authentication: ``Authorization: Bearer <token>`` (``manage.py apitoken create NAME``), or the
admin session of a staff user, whose writes then need the CSRF token like any form post.
Every change goes through ``jobs.services``, as the admin's and the CLI's do, and is recorded
in the audit trail under the token's name (``token:NAME``) or the user's (``user:NAME``);
``GET /api/audit`` reads that trail.

Errors are JSON, ``{"error": "...", "fields": {"name": ["..."]}}``: 400 for a bad parameter,
header or body (each problem under the name of what was wrong), 401/403 for credentials, 404
for an unknown job or run, 405 for a wrong method, 409 for a job name taken (or a trigger of a
continuous job), 422 for an Idempotency-Key reused with
another request, 503 when the database is unreachable or the web's connection pool stayed busy
(with ``Retry-After``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime
from functools import wraps
from typing import Any, TypeVar
from urllib.parse import quote, urlencode

from django.conf import settings
from django.core.exceptions import DisallowedHost, RequestDataTooBig, ValidationError
from django.db import InterfaceError, OperationalError
from django.db.models import Model, Q, QuerySet
from django.http import HttpRequest, HttpResponse, JsonResponse, RawPostDataException
from django.middleware.csrf import CsrfViewMiddleware
from django.utils import timezone
from django.utils.dateparse import parse_datetime
from django.views import defaults
from django.views.decorators.csrf import csrf_exempt

from jobs import services
from jobs.audit import Actor
from jobs.beat import slot_fates
from jobs.database.database_clock import database_now
from jobs.exceptions import IdempotencyKeyReused, NotFound, NotTriggerable, TokenRefused
from jobs.models import (
    JOB_ALERT_REASONS,
    JOB_DISPLAY_RELATED,
    AuditAction,
    AuditEntry,
    AuditSource,
    Blackout,
    CatchUp,
    Job,
    JobKind,
    JobRun,
    OnLost,
    Overlap,
    RunStatus,
    Trigger,
    alert_channel_values,
)
from jobs.registry import POLICY_FIELDS
from jobs.runlog import reading
from jobs.values import jsonvalues, serializers, text
from jobs.web import tokens, unavailable
from jobs.web.openapi import (
    IDEMPOTENCY_KEY_MAX,
    MAX_LIMIT,
    MAX_OFFSET,
    job_field_range,
    job_number_range,
    schema,
)
from jobs.workflow import backfill

View = Callable[..., HttpResponse]
MAX_BIGINT = 2**63 - 1
DEFAULT_LIMIT = 50


class ApiError(Exception):
    def __init__(
        self, status: int, message: str, fields: Mapping[str, list[str]] | None = None
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.fields = dict(fields or {})


def error_response(error: ApiError) -> JsonResponse:
    body: dict[str, Any] = {"error": error.message}
    if error.fields:
        body["fields"] = error.fields
    response = JsonResponse(body, status=error.status)
    if error.status == 401:
        response["WWW-Authenticate"] = 'Bearer realm="clusterjobs"'
    return response


def invalid(fields: Mapping[str, list[str]]) -> ApiError:
    return ApiError(400, "invalid request", fields)


# --- the decorator every endpoint goes through -------------------------------------------------


def endpoint(methods: Mapping[str, str | None]) -> Callable[[View], View]:
    """``methods`` maps each allowed method to the permission a staff session needs for it
    (``None``: no authentication at all). Tokens may do everything, read-only ones only read.
    HEAD is GET without the body; OPTIONS answers the ``Allow`` header to anyone."""
    allowed = dict(methods)
    if "GET" in allowed:
        allowed["HEAD"] = allowed["GET"]
    allow = ", ".join([*allowed, "OPTIONS"])

    def decorate(view: View) -> View:
        @csrf_exempt
        @wraps(view)
        def wrapped(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
            method = request.method or "GET"
            if method == "OPTIONS":
                response = HttpResponse(status=204)
                response["Allow"] = allow
                return response
            response = _answer(request, method, allowed, allow, view, *args, **kwargs)
            if method == "HEAD":
                # The length GET would send; the WSGI server may not strip a HEAD's body itself.
                response["Content-Length"] = str(len(response.content))
                response.content = b""
            return response

        return wrapped

    return decorate


def _answer(
    request: HttpRequest,
    method: str,
    allowed: Mapping[str, str | None],
    allow: str,
    view: View,
    *args: Any,
    **kwargs: Any,
) -> HttpResponse:
    try:
        if method not in allowed:
            refused = error_response(ApiError(405, f"{method} is not allowed"))
            refused["Allow"] = allow
            return refused
        permission = allowed[method]
        if permission is not None:
            setattr(request, _ACTOR, _authorize(request, permission))
        response = view(request, *args, **kwargs)
    except ApiError as exc:
        return error_response(exc)
    except NotFound as exc:
        return error_response(ApiError(404, str(exc)))
    except NotTriggerable as exc:
        return error_response(ApiError(409, str(exc)))
    except RequestDataTooBig:
        # Raised where the body is first read, here; Django's own answer is an HTML page.
        return too_large()
    except (OperationalError, InterfaceError) as exc:
        # Unreachable, restarting, or every connection of the web's pool busy for its timeout:
        # worth a retry (jobs.web.unavailable). Other database errors are bugs.
        return unavailable.answer(exc, what="API request")
    response["Cache-Control"] = "no-store"
    return response


# The methods that change nothing: what a read-only token and a session without CSRF may send.
_READS = ("GET", "HEAD", "OPTIONS")
# Where the endpoint leaves who made the request, for the views' writes (see ``actor``).
_ACTOR = "_jobs_api_actor"


def actor(request: HttpRequest) -> Actor:
    """Who an authenticated request acts for: its token, or its session's user."""
    found = getattr(request, _ACTOR, None)
    assert isinstance(found, Actor), "only views behind an authenticated endpoint write"
    return found


def _authorize(request: HttpRequest, permission: str) -> Actor:
    secret = tokens.bearer_secret(request)
    if secret is not None:
        try:
            token = tokens.authenticate(secret)
        except TokenRefused as exc:
            raise ApiError(401, str(exc)) from None
        if token.read_only and request.method not in _READS:
            raise ApiError(
                403,
                f"token {token.name!r} is read-only: it cannot {request.method} here "
                "(manage.py apitoken create NAME, without --read-only, makes one that can)",
            )
        return Actor.token(token.name)
    user = request.user
    if not user.is_authenticated or not user.is_active:
        raise ApiError(401, "authentication required: send Authorization: Bearer <token>")
    if not user.is_staff or not user.has_perm(permission):
        raise ApiError(403, f"this user lacks the {permission} permission")
    if request.method not in _READS and _csrf_rejects(request):
        raise ApiError(403, "CSRF check failed: a session's writes need the X-CSRFToken header")
    return Actor.user(user, AuditSource.API)


def _csrf_rejects(request: HttpRequest) -> bool:
    """The CSRF middleware's verdict (the views are exempt from the middleware itself, because
    token requests carry no cookie to forge)."""
    check = CsrfViewMiddleware(_unused_response)
    check.process_request(request)
    return check.process_view(request, _unused_response, (), {}) is not None


def _unused_response(request: HttpRequest) -> HttpResponse:
    return HttpResponse()


# --- parameters, headers and bodies ------------------------------------------------------------


class Query:
    """The query string, read strictly: unknown or repeated parameters are errors too."""

    def __init__(self, request: HttpRequest, known: Iterable[str]) -> None:
        self.errors: dict[str, list[str]] = {}
        self.values: dict[str, str] = {}
        known = set(known)
        for name in request.GET:
            given = request.GET.getlist(name)
            if name not in known:
                self.errors[name] = [f"unknown parameter; known: {', '.join(sorted(known))}"]
            elif len(given) > 1:
                self.errors[name] = ["give it once"]
            elif (problem := text.problem(given[0])) is not None:
                self.errors[name] = [f"must be storable text: it {problem}"]
            else:
                self.values[name] = given[0]

    def text(self, name: str) -> str | None:
        return self.values.get(name)

    def choice(self, name: str, choices: Iterable[str]) -> str | None:
        value = self.values.get(name)
        allowed = list(choices)
        if value is not None and value not in allowed:
            self.errors[name] = [f"{value!r} is not one of {', '.join(allowed)}"]
            return None
        return value

    def boolean(self, name: str) -> bool | None:
        value = self.choice(name, ("true", "false"))
        return None if value is None else value == "true"

    def integer(self, name: str, default: int, low: int, high: int) -> int:
        value = self.values.get(name)
        if value is None:
            return default
        try:
            number = int(value)
        except ValueError:
            self.errors[name] = [f"{value!r} is not a whole number"]
            return default
        if not low <= number <= high:
            self.errors[name] = [f"must be between {low} and {high}"]
            return default
        return number

    def instant(self, name: str) -> datetime | None:
        value = self.values.get(name)
        if value is None:
            return None
        try:
            parsed = parse_datetime(value.strip())
            if parsed is not None and timezone.is_naive(parsed):
                parsed = parsed.replace(tzinfo=UTC)
            if parsed is not None:
                # In UTC: PostgreSQL takes offsets up to 15:59 only, and a time near year 1 or
                # 9999 that an offset pushes out of range raises here.
                parsed = parsed.astimezone(UTC)
        except (ValueError, OverflowError):
            parsed = None
        if parsed is None:
            self.errors[name] = [f"{value!r} is not an ISO 8601 time, e.g. 2030-01-01T09:00:00Z"]
        return parsed

    def check(self) -> None:
        if self.errors:
            raise invalid(self.errors)


_Row = TypeVar("_Row", bound=Model)


def _narrowed(rows: QuerySet[_Row], **given: object) -> QuerySet[_Row]:
    """``rows`` filtered by each lookup the query string gave: a parameter left out (``None``)
    narrows nothing."""
    for lookup, value in given.items():
        if value is not None:
            rows = rows.filter(**{lookup: value})
    return rows


def _idempotency_key(request: HttpRequest) -> str:
    key = request.headers.get("Idempotency-Key")
    problem = None
    if key is None or not key.strip():
        problem = "required: a unique string per intended run, reused when retrying it"
    elif len(key) > IDEMPOTENCY_KEY_MAX:
        problem = f"at most {IDEMPOTENCY_KEY_MAX} characters"
    elif "," in key:
        # A server joins a header sent twice into one, "first,second" (WSGI has no other
        # way to pass it on): a comma is how a repeated header shows, so no key holds one.
        problem = "give the header once (a key cannot contain a comma)"
    elif not all("!" <= char <= "~" for char in key):
        problem = "printable ASCII characters only, no spaces"
    if problem is not None:
        raise invalid({"Idempotency-Key": [problem]})
    assert key is not None
    return key


def _json_object(request: HttpRequest) -> dict[str, Any]:
    return _json_object_of(request.body)


def _json_object_of(raw: bytes) -> dict[str, Any]:
    try:
        body = jsonvalues.loads(raw or b"null")
    except ValueError as exc:
        raise invalid({"body": [str(exc)]}) from None
    if not isinstance(body, dict):
        raise invalid({"body": ["must be a JSON object"]})
    errors: dict[str, list[str]] = {}
    for field, value in body.items():
        # Every text of the body, before any of it is used: PostgreSQL must be able to hold it.
        if not text.is_storable(field):
            errors["body"] = [f"a field's name {text.problem(field)}"]
            continue
        try:
            jsonvalues.check_storable(value)
        except ValueError as exc:
            errors[field] = [f"cannot be stored: {exc}"]
    if errors:
        raise invalid(errors)
    return body


# --- jobs --------------------------------------------------------------------------------------


@endpoint({"GET": "jobs.view_job", "POST": "jobs.add_job"})
def jobs_collection(request: HttpRequest) -> HttpResponse:
    if request.method == "POST":
        job = _create(_json_object(request), actor(request))
        response = JsonResponse(serializers.job_record(job, timezone.now()), status=201)
        response["Location"] = f"/api/jobs/{quote(job.name, safe='')}"
        return response
    query = Query(request, ("enabled", "kind"))
    enabled = query.boolean("enabled")
    kind = query.choice("kind", JobKind.values)
    query.check()
    jobs = Job.objects.select_related(*JOB_DISPLAY_RELATED).prefetch_related(
        "upstreams", "downstreams"
    )
    jobs = _narrowed(jobs, enabled=enabled, kind=kind)
    now = timezone.now()
    return JsonResponse({"results": [serializers.job_record(job, now) for job in jobs]})


def _create(body: dict[str, Any], by: Actor) -> Job:
    """A job from ``jobs add``'s options by their names, read and validated as the CLI's are
    (``services.definition_from``, ``services.create_job``)."""
    errors = {
        name: [f"unknown field; known: {', '.join(CREATABLE)}"]
        for name in sorted(set(body) - set(CREATABLE))
    }
    for name in ("name", "task"):
        if body.get(name) is None:
            errors[name] = ["required"]
    for name, value in body.items():
        check = CREATABLE.get(name)
        problem = None if check is None or name in errors else check(value)
        if problem:
            errors[name] = [problem]
    if errors:
        raise invalid(errors)
    values = {name: _instant(value) if name in _INSTANTS else value for name, value in body.items()}
    try:
        job = services.create_job(services.definition_from(values), actor=by)
    except ValidationError as exc:
        fields = _schedule_field_errors(exc)
        if "name" in fields and _exists(body["name"]):
            raise ApiError(409, f"a job named {body['name']!r} already exists", fields) from None
        raise invalid(fields) from None
    return services.get_job(job.name)


def _exists(name: str) -> bool:
    try:
        services.get_job(name)
    except NotFound:
        return False
    return True


def _schedule_field_errors(exc: ValidationError) -> dict[str, list[str]]:
    """``_field_errors``, with a one-off time's problem under ``at``, the field that gave it."""
    return {("at" if key == "run_at" else key): msgs for key, msgs in _field_errors(exc).items()}


@endpoint({"GET": "jobs.view_job", "PATCH": "jobs.change_job", "DELETE": "jobs.delete_job"})
def job_detail(request: HttpRequest, name: str) -> HttpResponse:
    if request.method == "DELETE":
        services.remove(name, actor=actor(request))
        return HttpResponse(status=204)
    job = services.get_job(name)
    if request.method == "PATCH":
        job = _patch(job, _json_object(request), actor(request))
    return JsonResponse(serializers.job_record(job, timezone.now()))


def _patch(job: Job, body: dict[str, Any], by: Actor) -> Job:
    errors: dict[str, list[str]] = {}
    known = ", ".join([*PATCHABLE, *services.SCHEDULE_FIELDS])
    if not body:
        raise invalid({"body": [f"give at least one of {known}"]})
    # A schedule given replaces the job's, read as `jobs add` reads one.
    scheduling = {name: body.pop(name) for name in services.SCHEDULE_FIELDS if name in body}
    schedule: Any = None
    if scheduling:
        try:
            schedule = services.schedule_from(scheduling)
        except ValidationError as exc:
            errors.update(_field_errors(exc))
    changes: dict[str, Any] = {}
    for name, value in body.items():
        check = PATCHABLE.get(name)
        if check is None:
            errors[name] = [f"unknown field; known: {known}"]
            continue
        problem = check(value)
        if problem:
            errors[name] = [problem]
        else:
            changes[name] = value
    if errors:
        raise invalid(errors)
    enabled = changes.pop("enabled", None)
    muting = "alerts_muted_until" in changes
    muted_until = _instant(changes.pop("alerts_muted_until", None))
    for name in ("active_from", "active_until"):
        if name in changes:
            changes[name] = _instant(changes[name])
    after = changes.pop("after", None)
    if changes or after is not None or scheduling:
        for name, value in changes.items():
            setattr(job, name, value)
        job.managed_by_code = False  # an operator's edit: the declaration in code stops applying
        if not scheduling:
            try:
                schedule = services.definition_of(job)
            except ValueError:
                raise invalid(
                    {"body": ["the job's schedule cannot be read: fix it in the admin"]}
                ) from None
        try:
            job = services.save_job(job, schedule, actor=by, after=after)
        except ValidationError as exc:
            raise invalid(_schedule_field_errors(exc)) from None
    if enabled is not None and enabled != job.enabled:
        job = services.set_enabled(job, enabled, actor=by)
    if muting:
        services.mute(job.name, muted_until, actor=by)
    return services.get_job(job.name)


def _trigger_kwargs(request: HttpRequest) -> Any:
    """A trigger's optional JSON body, ``{"kwargs": {...}}``: this run's keyword arguments. A
    form post (a staff session's, which carries its CSRF token so) has none."""
    if request.content_type != "application/json" or not request.body:
        return None
    body = _json_object(request)
    unknown = sorted(set(body) - {"kwargs"})
    if unknown:
        raise invalid({name: ["unknown field: a trigger takes only kwargs"] for name in unknown})
    return body.get("kwargs")


def _body_errors(
    body: dict[str, Any], known: Iterable[str], *, instants: Iterable[str]
) -> dict[str, list[str]]:
    """A request body's fields it does not know, and its required instants missing or bad."""
    known = list(known)
    errors = {
        field: [f"unknown field; known: {', '.join(known)}"]
        for field in sorted(set(body) - set(known))
    }
    for field in instants:
        problem = "required" if body.get(field) is None else _instant_or_null(body[field])
        if problem:
            errors[field] = [problem]
    return errors


def _field_errors(exc: ValidationError) -> dict[str, list[str]]:
    if not hasattr(exc, "error_dict"):
        return {"body": exc.messages}
    return {("body" if key == "__all__" else key): msgs for key, msgs in exc.message_dict.items()}


def _boolean(value: Any) -> str | None:
    return None if isinstance(value, bool) else "must be true or false"


def _whole(low: int, high: int = 2**31 - 1, nullable: bool = False) -> Callable[[Any], str | None]:
    def check(value: Any) -> str | None:
        if value is None and nullable:
            return None
        if isinstance(value, bool) or not isinstance(value, int):
            return "must be a whole number" + (" or null" if nullable else "")
        if not low <= value <= high:
            return f"must be between {low} and {high}"
        return None

    return check


def _job_whole(name: str, nullable: bool = False) -> Callable[[Any], str | None]:
    """A whole number in the range of the ``Job`` field ``name`` (its model validators)."""
    return _whole(*job_field_range(name), nullable=nullable)


def _job_number(name: str, nullable: bool = False) -> Callable[[Any], str | None]:
    """A number in the range of the ``Job`` field ``name`` (its model validators)."""
    low, high = job_number_range(name)

    def check(value: Any) -> str | None:
        if value is None and nullable:
            return None
        if isinstance(value, bool) or not isinstance(value, int | float):
            return "must be a number" + (" or null" if nullable else "")
        if not low <= value <= high:
            return f"must be between {low:g} and {high:g}"
        return None

    return check


def _one_of(choices: Iterable[str]) -> Callable[[Any], str | None]:
    allowed = list(choices)

    def check(value: Any) -> str | None:
        return None if value in allowed else f"must be one of {', '.join(allowed)}"

    return check


def _queue(value: Any) -> str | None:
    if not isinstance(value, str) or not value.strip():
        return "must be a non-empty string"
    return None


def _instant(value: Any) -> datetime | None:
    """An ISO 8601 time with its UTC offset (checked by ``_instant_or_null``) in UTC, or
    ``None``. In UTC: PostgreSQL refuses offsets beyond ±15:59 that Python takes."""
    parsed = None if value is None else parse_datetime(value)
    return None if parsed is None else parsed.astimezone(UTC)


def _names(value: Any) -> str | None:
    if not isinstance(value, list) or not all(isinstance(item, str) and item for item in value):
        return "must be a list of job names (empty: none)"
    if len(set(value)) != len(value):
        return "must name each job at most once"
    return None


def _short_text(limit: int) -> Callable[[Any], str | None]:
    def check(value: Any) -> str | None:
        if not isinstance(value, str) or len(value) > limit:
            return f"must be a string of at most {limit} characters"
        return None

    return check


def _instant_or_null(value: Any) -> str | None:
    if value is None:
        return None
    problem = "must be an ISO 8601 time with its UTC offset, e.g. 2030-01-01T09:00:00Z, or null"
    try:
        parsed = parse_datetime(value) if isinstance(value, str) else None
        if parsed is None or parsed.tzinfo is None:
            return problem
        parsed.astimezone(UTC)
    except (ValueError, OverflowError):
        return problem
    return None


def _reasons(value: Any) -> str | None:
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        return f"must be a list of reasons among {', '.join(JOB_ALERT_REASONS)} (empty: all)"
    return None


# What PATCH /api/jobs/{name} accepts, each with its type check; ranges are the model's (the
# numbers' are read from it, so a message says the range the model holds).
PATCHABLE: dict[str, Callable[[Any], str | None]] = {
    "enabled": _boolean,
    "overlap": _one_of(Overlap.values),
    "start_deadline": _job_whole("start_deadline"),
    "catch_up": _one_of(CatchUp.values),
    "on_lost": _one_of(OnLost.values),
    "max_retries": _job_whole("max_retries"),
    "retry_backoff": _job_whole("retry_backoff"),
    "soft_time_limit": _job_whole("soft_time_limit", nullable=True),
    "time_limit": _job_whole("time_limit", nullable=True),
    "lease_ttl": _job_whole("lease_ttl"),
    "queue": _queue,
    "priority": _job_whole("priority", nullable=True),
    "max_concurrency": _job_whole("max_concurrency"),
    "rate_limit_runs": _job_whole("rate_limit_runs", nullable=True),
    "rate_limit_period": _job_whole("rate_limit_period", nullable=True),
    "coalesce": _boolean,
    "business_days_only": _boolean,
    "holiday_calendar": _short_text(16),
    "active_from": _instant_or_null,
    "active_until": _instant_or_null,
    "alert_channels": _one_of(alert_channel_values()),
    "alert_reasons": _reasons,
    "alerts_muted_until": _instant_or_null,
    "after": _names,
    "max_duration": _job_whole("max_duration", nullable=True),
    "long_run_factor": _job_number("long_run_factor", nullable=True),
    "min_duration": _job_whole("min_duration", nullable=True),
    "baseline_alerts": _boolean,
}


def _required_text(value: Any) -> str | None:
    if not isinstance(value, str) or not value.strip():
        return "must be a non-empty string"
    return None


def _checked_elsewhere(value: Any) -> str | None:
    """No check of its own: ``services`` reads the value as the CLI's ``add`` does."""
    return None


# What POST /api/jobs accepts: `jobs add`'s options by name, each with its JSON type check
# (the CLI's parser makes these types); the rules for the values are the services', shared.
CREATABLE: dict[str, Callable[[Any], str | None]] = {
    "name": _required_text,
    "task": _required_text,
    **{name: _checked_elsewhere for name in services.SCHEDULE_FIELDS},
    "after": _names,
    "args": _checked_elsewhere,
    "kwargs": _checked_elsewhere,
    "paused": _boolean,
    **{name: PATCHABLE.get(name) or _job_whole(name) for name in POLICY_FIELDS},
}
_INSTANTS = ("active_from", "active_until")


@endpoint({"POST": "jobs.change_job"})
def job_pause(request: HttpRequest, name: str) -> HttpResponse:
    """Pause, with an optional ``reason`` and ``until`` (``jobs pause NAME --reason --until``)."""
    body = _pause_body(request, PAUSE_FIELDS)
    try:
        job = services.pause(name, **body, actor=actor(request))
    except ValidationError as exc:
        raise invalid(_field_errors(exc)) from None
    return JsonResponse(serializers.job_record(services.get_job(job.name), timezone.now()))


@endpoint({"POST": "jobs.change_job"})
def job_resume(request: HttpRequest, name: str) -> HttpResponse:
    _pause_body(request, ())
    job = services.resume(name, actor=actor(request))
    return JsonResponse(serializers.job_record(services.get_job(job.name), timezone.now()))


@endpoint({"POST": "jobs.change_job"})
def jobs_pause(request: HttpRequest) -> HttpResponse:
    """Pause every running job a ``queue`` and/or a name pattern (``match``) chooses."""
    body = _pause_body(request, (*SELECTION_FIELDS, *PAUSE_FIELDS))
    try:
        jobs = services.pause_many(**body, actor=actor(request))
    except ValidationError as exc:
        raise invalid(_field_errors(exc)) from None
    return JsonResponse({"paused": [job.name for job in jobs]})


@endpoint({"POST": "jobs.change_job"})
def jobs_resume(request: HttpRequest) -> HttpResponse:
    """Resume every paused job a ``queue`` and/or a name pattern (``match``) chooses."""
    body = _pause_body(request, SELECTION_FIELDS)
    try:
        jobs = services.resume_many(**body, actor=actor(request))
    except ValidationError as exc:
        raise invalid(_field_errors(exc)) from None
    return JsonResponse({"resumed": [job.name for job in jobs]})


PAUSE_FIELDS = ("reason", "until")
SELECTION_FIELDS = ("queue", "match")


def _pause_body(request: HttpRequest, known: tuple[str, ...]) -> dict[str, Any]:
    """The body's fields, each a string or null; the services read them. No body, or an empty
    form (what a bare ``POST`` sends), is no field: these endpoints took no body before."""
    try:
        raw = request.body
    except RawPostDataException:  # a form the CSRF check read already (a session's POST)
        raw = b"null" if request.POST else b""
    if not raw or (request.content_type == "multipart/form-data" and not request.POST):
        return {}
    body = _json_object_of(raw)
    errors = _body_errors(body, known, instants=())
    for field in set(body) & set(known):
        if body[field] is not None and not isinstance(body[field], str):
            errors[field] = ["must be a string or null"]
    if errors:
        raise invalid(errors)
    return body


# --- runs --------------------------------------------------------------------------------------

RUN_FILTERS = ("status", "trigger", "node", "since", "until", "limit", "offset")


@endpoint({"GET": "jobs.view_jobrun", "POST": "jobs.change_job"})
def job_runs(request: HttpRequest, name: str) -> HttpResponse:
    job = services.get_job(name)
    if request.method == "POST":
        key = _idempotency_key(request)
        kwargs = _trigger_kwargs(request)
        try:
            run, created = services.run_once(
                job.name, key, Trigger.API, actor=actor(request), kwargs=kwargs
            )
        except ValidationError as exc:
            raise invalid(_field_errors(exc)) from None
        except IdempotencyKeyReused as exc:
            # 422, as the IETF's Idempotency-Key draft and Stripe answer a key reused so.
            raise ApiError(422, str(exc), {"Idempotency-Key": [str(exc)]}) from None
        run = JobRun.objects.select_related("job").get(pk=run.pk)
        response = JsonResponse(serializers.run_record(run), status=201 if created else 200)
        response["Location"] = f"/api/runs/{run.pk}"
        # A replayed key is reported, so a client can tell its retry from a first success.
        response["Idempotent-Replayed"] = "false" if created else "true"
        return response
    query = Query(request, RUN_FILTERS)
    return _run_page(request, query, JobRun.objects.filter(job=job))


UPCOMING_PARAMETERS = ("count", "since")


@endpoint({"GET": "jobs.view_job"})
def job_upcoming(request: HttpRequest, name: str) -> HttpResponse:
    """The job's next slots, each with its fate (``jobs.beat.slot_fates``)."""
    problem = text.problem(name)
    if problem is not None:
        raise invalid({"name": [f"must be storable text: it {problem}"]})
    query = Query(request, UPCOMING_PARAMETERS)
    count = query.integer("count", slot_fates.DEFAULT_COUNT, 1, slot_fates.MAX_COUNT)
    since = query.instant("since")
    query.check()
    job = services.get_job(name)
    since = since or database_now()  # the beats fire by the database's clock
    try:
        fates = slot_fates.upcoming(job, since=since, count=count)
    except ValidationError as exc:
        raise invalid(_field_errors(exc)) from None
    return JsonResponse(
        {
            "job": job.name,
            "schedule": serializers.schedule_words(job),
            "since": since,
            "results": [serializers.fate_record(fate) for fate in fates],
        }
    )


@endpoint({"POST": "jobs.change_job"})
def job_backfill(request: HttpRequest, name: str) -> HttpResponse:
    """Make the runs of the job's past slots in a range that have none
    (``jobs.workflow.backfill``)."""
    body = _json_object(request)
    errors = _body_errors(body, BACKFILL_FIELDS, instants=("since", "until"))
    max_runs = body.get("max_runs", backfill.DEFAULT_MAX_RUNS)
    problem = _whole(1)(max_runs)
    if problem:
        errors["max_runs"] = [problem]
    dry_run = body.get("dry_run", False)
    if _boolean(dry_run):
        errors["dry_run"] = ["must be true or false"]
    if errors:
        raise invalid(errors)
    since, until = _instant(body["since"]), _instant(body["until"])
    assert since is not None and until is not None
    try:
        result = services.backfill_job(
            name, since, until, actor=actor(request), max_runs=max_runs, dry_run=dry_run
        )
    except ValidationError as exc:
        raise invalid(_field_errors(exc)) from None
    return JsonResponse(serializers.backfill_record(result), status=200 if dry_run else 201)


BACKFILL_FIELDS = ("since", "until", "max_runs", "dry_run")


@endpoint({"GET": "jobs.view_jobrun"})
def runs_collection(request: HttpRequest) -> HttpResponse:
    query = Query(request, ("job", *RUN_FILTERS))
    runs = JobRun.objects.all()
    job = query.text("job")
    if job is not None:
        # By id, so the (job, slot) index serves the page; a join on the name walks every run.
        job_id = Job.objects.filter(name=job).values_list("pk", flat=True).first()
        runs = runs.filter(job_id=job_id) if job_id is not None else runs.none()
    return _run_page(request, query, runs)


def _run_page(request: HttpRequest, query: Query, runs: QuerySet[JobRun]) -> HttpResponse:
    status = query.choice("status", RunStatus.values)
    trigger = query.choice("trigger", Trigger.values)
    node = query.text("node")
    since, until = query.instant("since"), query.instant("until")
    runs = _narrowed(
        runs,
        status=status,
        trigger=trigger,
        node=node,
        scheduled_for__gte=since,
        scheduled_for__lt=until,
    )
    ordered = runs.select_related("job").order_by("-scheduled_for", "-id")
    return _page(request, query, ordered, serializers.run_record)


def _page(
    request: HttpRequest,
    query: Query,
    rows: QuerySet[Any],
    record: Callable[[Any], dict[str, Any]],
) -> HttpResponse:
    """One page of ``rows`` (already filtered and ordered, not yet read) by ``limit`` and
    ``offset``, with the link to the next; the query's other parameters are read by now."""
    limit = query.integer("limit", DEFAULT_LIMIT, 1, MAX_LIMIT)
    offset = query.integer("offset", 0, 0, MAX_OFFSET)
    query.check()
    page = list(rows[offset:][: limit + 1])
    following = None
    if len(page) > limit and offset + limit <= MAX_OFFSET:
        params = {**query.values, "offset": str(offset + limit)}
        following = f"{request.path}?{urlencode(params)}"
    return JsonResponse({"results": [record(row) for row in page[:limit]], "next": following})


@endpoint({"GET": "jobs.view_jobrun"})
def run_detail(request: HttpRequest, run_id: str) -> HttpResponse:
    # Read here, not by a path converter, so that "/api/runs/abc" is a JSON 404 as well.
    run = None
    number = _run_number(run_id)
    if number is not None:
        run = JobRun.objects.select_related("job").filter(pk=number).first()
    if run is None:
        raise ApiError(404, f"no run with id {run_id!r}")
    return JsonResponse(serializers.run_record(run, with_traceback=True))


def _run_number(run_id: str) -> int | None:
    """The id a run's path gives, or ``None`` when no run can have it."""
    # Its length first: int() raises on a string of more than 4,300 digits.
    digits = len(run_id) <= len(str(MAX_BIGINT)) and run_id.isascii() and run_id.isdigit()
    return int(run_id) if digits and int(run_id) <= MAX_BIGINT else None


@endpoint({"GET": "jobs.view_jobrun"})
def run_log(request: HttpRequest, run_id: str) -> HttpResponse:
    """The run's own log after ``cursor`` (the last ``seq`` read; 0, the start), the cursor to
    ask with next, and whether the run finished: a follower asks again until ``finished``."""
    query = Query(request, ("cursor", "limit"))
    after = query.integer("cursor", 0, 0, MAX_BIGINT)
    limit = query.integer("limit", reading.DEFAULT_LIMIT, 1, reading.MAX_LIMIT)
    query.check()
    number = _run_number(run_id)
    if number is None:
        raise ApiError(404, f"no run with id {run_id!r}", {"run_id": ["no such run"]})
    try:
        page = reading.page(number, after=after, limit=limit)
    except NotFound:
        raise ApiError(404, f"no run with id {run_id!r}", {"run_id": ["no such run"]}) from None
    return JsonResponse(page.record())


# --- the audit trail ---------------------------------------------------------------------------


# --- blackout windows ---------------------------------------------------------------------------

BLACKOUT_FIELDS = ("name", "starts_at", "ends_at", "job", "description")


@endpoint({"GET": "jobs.view_blackout", "POST": "jobs.add_blackout"})
def blackouts_collection(request: HttpRequest) -> HttpResponse:
    if request.method == "POST":
        window = _add_blackout(_json_object(request), actor(request))
        return JsonResponse(services.blackout_values(window), status=201)
    Query(request, ()).check()
    windows = Blackout.objects.select_related("job")
    return JsonResponse({"results": [services.blackout_values(w) for w in windows]})


def _add_blackout(body: dict[str, Any], by: Actor) -> Blackout:
    errors = _body_errors(body, BLACKOUT_FIELDS, instants=("starts_at", "ends_at"))
    for field, required in (("name", True), ("job", False), ("description", False)):
        value = body.get(field)
        if value is None and not required:
            continue
        if not isinstance(value, str) or (required and not value.strip()):
            errors[field] = ["must be a non-empty string" if required else "must be a string"]
    if errors:
        raise invalid(errors)
    starts_at, ends_at = _instant(body["starts_at"]), _instant(body["ends_at"])
    assert starts_at is not None and ends_at is not None
    try:
        return services.add_blackout(
            body["name"],
            starts_at,
            ends_at,
            actor=by,
            job_name=body.get("job"),
            description=body.get("description") or "",
        )
    except ValidationError as exc:
        raise invalid(_field_errors(exc)) from None


@endpoint({"DELETE": "jobs.delete_blackout"})
def blackout_detail(request: HttpRequest, name: str) -> HttpResponse:
    services.remove_blackout(name, actor=actor(request))
    return HttpResponse(status=204)


@endpoint({"GET": "jobs.view_auditentry"})
def audit_collection(request: HttpRequest) -> HttpResponse:
    query = Query(request, ("job", "actor", "action", "source", "limit", "offset"))
    job, who = query.text("job"), query.text("actor")
    action = query.choice("action", AuditAction.values)
    source = query.choice("source", AuditSource.values)
    entries = AuditEntry.objects.all()
    if job is not None:
        # Its entries under this name, and those of the job now so named from before a rename.
        entries = entries.filter(Q(job_name=job) | Q(job__name=job))
    entries = _narrowed(entries, actor=who, action=action, source=source)
    return _page(request, query, entries.order_by("-at", "-id"), serializers.audit_record)


def bad_request(request: HttpRequest, exception: Exception) -> HttpResponse:
    """Django's 400 (a Host header not in DJANGO_ALLOWED_HOSTS, a body over
    DATA_UPLOAD_MAX_MEMORY_SIZE, ...): JSON under /api/ saying which, the stock page elsewhere."""
    if not request.path.startswith("/api/"):
        return defaults.bad_request(request, exception)
    if isinstance(exception, RequestDataTooBig):
        return too_large()
    if isinstance(exception, DisallowedHost):
        return error_response(ApiError(400, "bad request: the Host header is not allowed here"))
    return error_response(ApiError(400, f"bad request: {exception}"))


def too_large() -> HttpResponse:
    limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    return error_response(ApiError(413, f"the request body is too large: at most {limit} bytes"))


def not_found(request: HttpRequest) -> HttpResponse:
    """Any other path under /api/: JSON, like every answer of the API."""
    return error_response(ApiError(404, f"no such API path: {request.path}"))


@endpoint({"GET": None})
def openapi(request: HttpRequest) -> HttpResponse:
    return JsonResponse(schema())
