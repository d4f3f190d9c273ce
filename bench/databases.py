"""Throwaway databases for benchmarks, created next to the one ``DATABASE_URL`` names."""

from __future__ import annotations

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
