"""Throwaway databases for benchmarks, created next to the one ``DATABASE_URL`` names."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager

import dj_database_url
import psycopg
from psycopg import sql


def fresh_database(url: str, suffix: str) -> tuple[str, str, str]:
    """An empty database named after ``url``'s plus ``suffix``: its name, URL and admin URL."""
    name = dj_database_url.parse(url)["NAME"] + suffix
    admin = admin_url(url)
    recreate(admin, name, create=True)
    return name, url.rsplit("/", 1)[0] + "/" + name, admin


def admin_url(url: str) -> str:
    """The URL of the server's ``postgres`` database, from which others are created/dropped."""
    config = dj_database_url.parse(url)
    auth = config["USER"] + (f":{config['PASSWORD']}" if config.get("PASSWORD") else "")
    port = f":{config['PORT']}" if config.get("PORT") else ""
    return f"postgresql://{auth}@{config['HOST']}{port}/postgres"


def recreate(admin: str, name: str, create: bool) -> None:
    """Drop database ``name`` (forcing its connections out) and, with ``create``, make it anew."""
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
        )
        if create:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))


@contextmanager
def django_on_fresh_database(
    suffix: str, jobs_modules: str | None, *, keep: bool = False
) -> Iterator[str]:
    """Django set up on a fresh, migrated database named after ``DATABASE_URL``'s plus
    ``suffix`` (its URL yielded), with the bench's job modules (``None``: the environment's);
    dropped at the end unless ``keep``. Exits with status 2 when ``DATABASE_URL`` (PostgreSQL)
    or ``CELERY_BROKER_URL`` is not set."""
    url = os.environ.get("DATABASE_URL")
    if not url or not url.startswith("postgres") or not os.environ.get("CELERY_BROKER_URL"):
        print("set DATABASE_URL (PostgreSQL) and CELERY_BROKER_URL", file=sys.stderr)
        raise SystemExit(2)
    name, bench_url, admin = fresh_database(url, suffix)
    os.environ.update(DATABASE_URL=bench_url, DJANGO_DEBUG=os.environ.get("DJANGO_DEBUG", "1"))
    if jobs_modules is not None:
        os.environ["JOBS_MODULES"] = jobs_modules
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.settings")
    import django

    django.setup()
    from django.core.management import call_command
    from django.db import connections

    try:
        call_command("migrate", verbosity=0)
        yield bench_url
    finally:
        connections.close_all()
        if not keep:
            recreate(admin, name, create=False)
