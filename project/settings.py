"""Django settings, 12-factor: everything that differs between deployments comes from the
environment (see ``project/env.py`` and docs/configuration.md)."""

from __future__ import annotations

from pathlib import Path

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

from project.env import Env

BASE_DIR = Path(__file__).resolve().parent.parent
env = Env()

DEBUG = env.bool("DJANGO_DEBUG", default=False)

# A missing or short secret in production is an error; in debug mode a fixed, obviously-dev key
# is fine because sessions signed with it are worthless outside this machine.
_MIN_SECRET_KEY_LENGTH = 50
_secret = env.str("DJANGO_SECRET_KEY")
if _secret is None:
    if not DEBUG:
        raise ImproperlyConfigured(
            "DJANGO_SECRET_KEY is not set: set it to a long random string "
            "(or set DJANGO_DEBUG=1 for local development)."
        )
    _secret = "dev-only-insecure-key-never-use-in-production-0123456789abcdef"
elif not DEBUG and len(_secret) < _MIN_SECRET_KEY_LENGTH:
    # A short key can be guessed offline from one signed cookie, and then every session,
    # password-reset link and signed value can be forged. Django's own deploy check wants 50.
    raise ImproperlyConfigured(
        f"DJANGO_SECRET_KEY is too short ({len(_secret)} characters): production needs at "
        f"least {_MIN_SECRET_KEY_LENGTH}, e.g. "
        '`python -c "import secrets; print(secrets.token_urlsafe(50))"`.'
    )
SECRET_KEY = _secret

ALLOWED_HOSTS = env.list(
    "DJANGO_ALLOWED_HOSTS", default=["localhost", "127.0.0.1", "[::1]"] if DEBUG else []
)
if not DEBUG and not ALLOWED_HOSTS:
    raise ImproperlyConfigured(
        "DJANGO_ALLOWED_HOSTS is not set: give a comma-separated list of host names."
    )
CSRF_TRUSTED_ORIGINS = env.list("DJANGO_CSRF_TRUSTED_ORIGINS")

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django_celery_beat",
    "jobs",
]

MIDDLEWARE = [
    # Probes and the scrape (/livez, /readyz, /healthz, /metrics) answer before host validation
    # and the HTTPS redirect, so a load balancer or Prometheus can reach them by IP.
    "jobs.web.probes.ProbeMiddleware",
    # A view's connection error (the pool busy past its timeout, the database unreachable) is a
    # 503 with Retry-After, not a 500.
    "jobs.web.unavailable.DatabaseUnavailable",
    "django.middleware.security.SecurityMiddleware",
    # A NUL in a URL (admin filters, searches, object ids) is a 400, not a database error.
    "jobs.web.urlchecks.RefuseNulInUrl",
    # Serves the admin's static files from the image (collectstatic) without a separate server.
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]
if DEBUG:
    # runserver serves static files itself; WhiteNoise would only warn that collectstatic's
    # folder is missing.
    MIDDLEWARE.remove("whitenoise.middleware.WhiteNoiseMiddleware")

ROOT_URLCONF = "project.urls"
WSGI_APPLICATION = "project.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

_database_url = env.required(
    "DATABASE_URL",
    "e.g. postgresql://user@127.0.0.1:5432/jobs. `make run` and `make test` start an embedded "
    "PostgreSQL and set it for you when it is unset.",
)
try:
    DATABASES = {"default": dj_database_url.parse(_database_url, conn_max_age=60)}
except Exception as exc:  # dj-database-url raises bare ValueError/KeyError on bad schemes
    raise ImproperlyConfigured(f"DATABASE_URL is not a valid database URL: {exc}") from None
DATABASES["default"]["CONN_HEALTH_CHECKS"] = True
_pooler = env.str("DATABASE_POOLER", "none")
if _pooler not in ("none", "transaction"):
    raise ImproperlyConfigured(
        f"DATABASE_POOLER={_pooler!r} is not a pooling mode: use none or transaction."
    )
if _pooler == "transaction":
    # PgBouncer in transaction pooling hands a server connection to another client after each
    # transaction: no server-side prepared statement or cursor may outlive one.
    DATABASES["default"].setdefault("OPTIONS", {})["prepare_threshold"] = None
    DATABASES["default"]["DISABLE_SERVER_SIDE_CURSORS"] = True
# The web's connection budget (docs/connections.md). A web process serves each request on a thread
# of its own (runserver, gunicorn --threads), and each thread would keep a connection of its own:
# concurrent clients could take every connection PostgreSQL has, the beats' and the workers'
# included. With DATABASE_POOL_MAX_SIZE set (the launch files set it for the web only), the
# process's requests share a pool of at most that many connections, and a request that finds them
# all busy waits up to DATABASE_POOL_TIMEOUT seconds, then is answered 503 (jobs.web.unavailable).
# Beats and workers refuse it (jobs.database.connection_budget): a pool opened before a fork is
# shared by the forked pool processes, and their lease renewals must not wait for a pooled
# connection behind the runs.
_pool_max = env.int("DATABASE_POOL_MAX_SIZE", default=0, minimum=0)
if _pool_max:
    DATABASES["default"]["CONN_MAX_AGE"] = 0  # Django's pool keeps them: no persistent ones
    DATABASES["default"].setdefault("OPTIONS", {})["pool"] = {
        # One kept open between requests; the rest opened when requests need them and closed
        # after max_idle (psycopg_pool's 10 minutes).
        "min_size": 1,
        "max_size": _pool_max,
        "timeout": env.float("DATABASE_POOL_TIMEOUT", default=5.0, minimum=0.1),
    }
# Who holds each connection, in pg_stat_activity: "clusterjobs web" for a pooled (web) process, the
# beats and workers name theirs when they start (jobs.database.connection_budget). A name given in
# DATABASE_URL (?application_name=...) is kept.
DATABASES["default"].setdefault("OPTIONS", {}).setdefault(
    "application_name", "clusterjobs web" if _pool_max else "clusterjobs"
)

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True
# Datetimes on every page with seconds and the zone (project/formats, jobs.values.timestamps).
FORMAT_MODULE_PATH = ["project.formats"]

STATIC_URL = "static/"
STATIC_ROOT = BASE_DIR / "staticfiles"

# Django's Tasks framework (Django 6.0's django.tasks): @task functions run as guarded runs on the
# Celery workers (docs/tasks.md). Django 5.2 has no django.tasks and never reads this setting.
TASKS = {"default": {"BACKEND": "jobs.django_tasks.backend.ClusterTaskBackend"}}

# --- Celery (namespace CELERY_) -------------------------------------------------------------
CELERY_BROKER_URL = env.required(
    "CELERY_BROKER_URL",
    "e.g. redis://127.0.0.1:6379/0 or amqp://guest:guest@127.0.0.1:5672//. `make run` and "
    "`make test` start an embedded Redis and set it for you when it is unset.",
)
# Run records live in the database; Celery's result backend would only duplicate them.
CELERY_RESULT_BACKEND = None
CELERY_TASK_IGNORE_RESULT = True
# No results to expire, so no celery.backend_cleanup entry (Celery's beat installs one when
# results expire and the backend does not expire them itself: jobs.beat.configured).
CELERY_RESULT_EXPIRES = None
# A worker takes one message at a time and acknowledges it after the run ends, so a crashed
# worker's message is redelivered (and then found already claimed: a recorded no-op).
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
# Messages survive a broker restart: persistent delivery (RabbitMQ: durable queues, the default;
# Redis: with append-only persistence, as in docker/compose.yaml).
CELERY_TASK_DEFAULT_DELIVERY_MODE = "persistent"
CELERY_TASK_DEFAULT_QUEUE = "default"
# Events let Flower show every job under its own task name.
CELERY_WORKER_SEND_TASK_EVENTS = True
CELERY_TASK_SEND_SENT_EVENT = True
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_TIMEZONE = "UTC"
CELERY_ENABLE_UTC = True
CELERY_BEAT_SCHEDULER = "jobs.beat.scheduler:ClusterScheduler"
# Celery's Django fixup closes every database connection around each task unless this is set:
# each run would pay for a new connection (~20 ms on a busy host, see bench/lease_bench.py).
# The runner recycles connections the way Django does per request (CONN_MAX_AGE, health check).
CELERY_DB_REUSE_MAX = 1000
CELERY_BROKER_TRANSPORT_OPTIONS = {
    # Longer than any sane job, so Redis redelivery is a crash-recovery path, not a normal one.
    "visibility_timeout": env.int("JOBS_VISIBILITY_TIMEOUT", default=3600, minimum=1),
    # Redis: one list per priority, all ten (kombu's default steps 0, 3, 6, 9 merge them).
    "priority_steps": list(range(10)),
}
# Redis Sentinel (CELERY_BROKER_URL=sentinel://host1:26379;sentinel://host2:26379;...): the name
# of the master the sentinels monitor, and the sentinels' own password if they require one (the
# Redis nodes' password goes in the URL as usual). docs/deploy.md, "Redis Sentinel".
JOBS_BROKER_SENTINEL_MASTER = env.str("JOBS_BROKER_SENTINEL_MASTER", "") or ""
if JOBS_BROKER_SENTINEL_MASTER:
    CELERY_BROKER_TRANSPORT_OPTIONS["master_name"] = JOBS_BROKER_SENTINEL_MASTER
_sentinel_password = env.str("JOBS_BROKER_SENTINEL_PASSWORD", "") or ""
if _sentinel_password:
    CELERY_BROKER_TRANSPORT_OPTIONS["sentinel_kwargs"] = {"password": _sentinel_password}
# A job's priority, 0-9, 9 the most urgent, on both brokers: RabbitMQ queues are declared with
# x-max-priority (an existing queue declared without it must be deleted first: RabbitMQ refuses a
# redeclare with other arguments), and jobs.broker.dispatch turns it around for Redis, where 0 is
# first.
CELERY_TASK_QUEUE_MAX_PRIORITY = 9

# --- Jobs app ------------------------------------------------------------------------------
JOBS_MODULES = env.list("JOBS_MODULES")
# How long beat may sleep between looks at the schedule change log; an edit is picked up within
# this. An idle tick is one indexed query (~0.2 ms), so half a second costs nothing.
JOBS_BEAT_MAX_INTERVAL = env.float("JOBS_BEAT_MAX_INTERVAL", default=0.5, minimum=0.05)
# Every beat runs a maintenance pass this often (seconds); a lease lets one beat at a time do it.
JOBS_MAINTENANCE_INTERVAL = env.float("JOBS_MAINTENANCE_INTERVAL", default=5.0, minimum=0.1)
# A run still `scheduled` this long after its message was sent is published again (seconds).
JOBS_REPUBLISH_AFTER = env.float("JOBS_REPUBLISH_AFTER", default=30.0, minimum=0.1)
# A burst of slots is published in bulk: messages built once per job shape, a chunk per round
# trip (jobs.broker.bulk_publish). 0: one send_task per run.
JOBS_BULK_PUBLISH = env.bool("JOBS_BULK_PUBLISH", default=True)
# For tests only: this beat's clock runs this many seconds ahead (negative: behind) of the
# machine's, to show that node clock skew does not change which slots run.
JOBS_BEAT_TEST_CLOCK_OFFSET = env.float("JOBS_BEAT_TEST_CLOCK_OFFSET", default=0.0)
# How often each worker node heartbeats (seconds); a node that misses 3 is dead, and its
# continuous jobs move to live nodes (jobs.continuous.nodes, jobs.continuous.supervisor).
JOBS_NODE_HEARTBEAT = env.float("JOBS_NODE_HEARTBEAT", default=5.0, minimum=0.5)

# --- Production hardening (checked by `manage.py check --deploy`) --------------------------
# X-Forwarded-Proto decides whether Django treats a request as HTTPS (secure cookies, the
# redirect, CSRF's origin check). Any client can send that header, so it is believed only when
# the operator says a proxy in front sets it (and strips a client's own).
if env.bool("DJANGO_BEHIND_PROXY", default=False):
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
if not DEBUG:
    SECURE_SSL_REDIRECT = env.bool("DJANGO_SECURE_SSL_REDIRECT", default=True)
    SESSION_COOKIE_SECURE = True
    CSRF_COOKIE_SECURE = True
    SECURE_HSTS_SECONDS = env.int("DJANGO_HSTS_SECONDS", default=31536000, minimum=0)
    SECURE_HSTS_INCLUDE_SUBDOMAINS = True
    SECURE_HSTS_PRELOAD = True
    SECURE_CONTENT_TYPE_NOSNIFF = True
    X_FRAME_OPTIONS = "DENY"

# --- Operations: Flower link, metrics access, health, retention, log format ----------------
# Where the admin links each run's Celery task (``<FLOWER_URL>/task/jobrun-<id>``); empty: no link.
FLOWER_URL = env.str("FLOWER_URL", "") or ""
# Who may scrape /metrics without an API token: comma-separated addresses or networks (CIDR).
JOBS_METRICS_ALLOW_FROM = env.list("JOBS_METRICS_ALLOW_FROM")
# How often each beat records its heartbeat, and after how long without one a beat counts as
# gone for /healthz and the dashboard (seconds). Nodes: JOBS_NODE_HEARTBEAT (jobs.continuous.nodes).
JOBS_BEAT_HEARTBEAT_INTERVAL = env.float("JOBS_BEAT_HEARTBEAT_INTERVAL", default=5.0, minimum=0.1)
JOBS_BEAT_STALE_AFTER = env.float("JOBS_BEAT_STALE_AFTER", default=30.0, minimum=1.0)
# How long finished runs are kept, per status: a duration ("7d", "12h") or "forever".
JOBS_RETENTION = {
    status: env.str(f"JOBS_RETENTION_{status.upper()}", default) or default
    for status, default in (
        ("succeeded", "7d"),
        ("skipped", "7d"),
        ("cancelled", "7d"),
        ("failed", "30d"),
        ("missed", "30d"),
        ("lost", "30d"),
    )
}
# How often the maintenance loop prunes (seconds).
JOBS_RETENTION_INTERVAL = env.float("JOBS_RETENTION_INTERVAL", default=3600.0, minimum=1.0)
# A pruning pass that deleted runs vacuums the run and lease tables (jobs/upkeep/retention.py).
JOBS_RETENTION_VACUUM = env.bool("JOBS_RETENTION_VACUUM", default=True)
# A run's own log (jobs/runlog): what its code logs at JOBS_RUN_LOG_LEVEL or above (a job's
# @job(log_level=...) overrides it) and writes to stdout/stderr, kept with the run. At most
# JOBS_RUN_LOG_MAX_LINES lines a run (its first and last halves; a line says how many were cut
# between), each cut to JOBS_RUN_LOG_MAX_LINE_CHARS, written every JOBS_RUN_LOG_FLUSH_SECONDS.
JOBS_RUN_LOG = env.bool("JOBS_RUN_LOG", default=True)
JOBS_RUN_LOG_LEVEL = env.str("JOBS_RUN_LOG_LEVEL", "INFO") or "INFO"
JOBS_RUN_LOG_MAX_LINES = env.int("JOBS_RUN_LOG_MAX_LINES", default=2000, minimum=2)
JOBS_RUN_LOG_MAX_LINE_CHARS = env.int("JOBS_RUN_LOG_MAX_LINE_CHARS", default=4000, minimum=80)
JOBS_RUN_LOG_FLUSH_SECONDS = env.float("JOBS_RUN_LOG_FLUSH_SECONDS", default=1.0, minimum=0.05)
# "plain" lines, or "json": one JSON object per line, each line of a run carrying its run id,
# job, slot, fencing token and node (jobs.process.logcontext).
JOBS_LOG_FORMAT = env.str("JOBS_LOG_FORMAT", "plain") or "plain"
if JOBS_LOG_FORMAT not in ("plain", "json"):
    raise ImproperlyConfigured(f"JOBS_LOG_FORMAT={JOBS_LOG_FORMAT!r} must be plain or json.")
if JOBS_LOG_FORMAT == "json":
    # Celery would replace the root handler with its own plain format in workers and beats.
    CELERY_WORKER_HIJACK_ROOT_LOGGER = False

# --- Alerts: where incidents are notified (validated in jobs.conf) ------------------------
# A URL that receives each incident's opening and resolution as signed JSON, the shared secret
# its HMAC-SHA256 signature is made with, and the addresses e-mailed.
JOBS_ALERT_WEBHOOK_URL = env.str("JOBS_ALERT_WEBHOOK_URL", "") or ""
JOBS_ALERT_WEBHOOK_SECRET = env.str("JOBS_ALERT_WEBHOOK_SECRET", "") or ""
JOBS_ALERT_EMAILS = env.list("JOBS_ALERT_EMAILS")
# Webhooks to loopback, private, link-local... addresses are refused unless this is set.
JOBS_ALERT_ALLOW_PRIVATE_TARGETS = env.bool("JOBS_ALERT_ALLOW_PRIVATE_TARGETS", default=False)
# This deployment's address as operators reach it, for the admin links of alerts.
JOBS_PUBLIC_URL = env.str("JOBS_PUBLIC_URL", "") or ""
# E-mail goes through Django's backend: SMTP on EMAIL_HOST:EMAIL_PORT unless told otherwise.
EMAIL_HOST = env.str("EMAIL_HOST", "localhost") or "localhost"
EMAIL_PORT = env.int("EMAIL_PORT", default=25, minimum=1)
EMAIL_HOST_USER = env.str("EMAIL_HOST_USER", "") or ""
EMAIL_HOST_PASSWORD = env.str("EMAIL_HOST_PASSWORD", "") or ""
EMAIL_USE_TLS = env.bool("EMAIL_USE_TLS", default=False)
EMAIL_TIMEOUT = env.int("EMAIL_TIMEOUT", default=10, minimum=1)
DEFAULT_FROM_EMAIL = env.str("DEFAULT_FROM_EMAIL", "jobs@localhost") or "jobs@localhost"

LOG_LEVEL = env.str("DJANGO_LOG_LEVEL", "INFO")
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {
        "plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"},
        "json": {"()": "jobs.process.logcontext.JsonFormatter"},
    },
    "filters": {"run_context": {"()": "jobs.process.logcontext.RunContextFilter"}},
    "handlers": {
        "console": {
            "class": "logging.StreamHandler",
            "formatter": JOBS_LOG_FORMAT,
            "filters": ["run_context"],
        }
    },
    "root": {"handlers": ["console"], "level": LOG_LEVEL},
    "loggers": {"django.db.backends": {"level": "WARNING"}},
}
