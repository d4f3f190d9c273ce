"""The documentation's generated references, written when the site is built so they cannot drift.

An MkDocs hook (``hooks:`` in mkdocs.yml): a page holding ``<!-- reference: NAME -->`` gets
that reference in its place.

- ``cli``: the help of ``manage.py jobs`` and of each of its verbs, as argparse prints it from
  the definitions in ``jobs/management/commands/jobs.py`` (in a Django process of its own:
  ``python -m devtools.docs_reference cli`` prints it).
- ``configuration``: the environment variables ``project/settings.py`` reads (found in its
  source: each ``env.<kind>("NAME", default=...)`` call, with its kind, default and minimum),
  the ones only ``make run`` and compose read, and the settings of the ``jobs`` app with their
  defaults (``jobs.conf.DEFAULTS``, and the alert channels' settings). The meaning of each
  variable is written here, in ``MEANINGS`` (an alert channel's, by its channel): a variable
  the code reads without one, or a meaning for a variable no code reads, fails the build,
  naming it.

A reference missing from its page, or a marker naming no reference, fails the build too.
"""

from __future__ import annotations

import argparse
import ast
import os
import re
import subprocess
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SETTINGS = ROOT / "project" / "settings.py"
MARKER = re.compile(r"^<!-- reference: ([\w-]+) -->$", re.M)


class StaleReference(Exception):
    """The code and the documentation's data disagree; the message says where."""


# --- what each variable means ------------------------------------------------------------------

# Variable → (meaning, a remark on its default). Read by project/settings.py. The alert
# channels' own settings mean what their channel declares (jobs.alerts.channels): see _meanings().
MEANINGS: Mapping[str, tuple[str, str]] = {
    "DATABASE_URL": (
        "PostgreSQL URL (dj-database-url syntax)",
        "embedded, under `make run` / `make test`",
    ),
    "CELERY_BROKER_URL": (
        "`redis://…`, `amqp://…` or `sentinel://…;sentinel://…`",
        "embedded Redis, under `make run` / `make test`",
    ),
    "DJANGO_SECRET_KEY": ("required unless `DJANGO_DEBUG=1`, at least 50 characters", ""),
    "DJANGO_DEBUG": ("`1` for development", "production settings"),
    "DJANGO_ALLOWED_HOSTS": ("comma-separated; required unless debug", "localhost in debug"),
    "DJANGO_CSRF_TRUSTED_ORIGINS": ("comma-separated origins", ""),
    "DJANGO_SECURE_SSL_REDIRECT": ("production: redirect HTTP to HTTPS", ""),
    "DJANGO_HSTS_SECONDS": (
        "production: Django's `SECURE_HSTS_SECONDS`, how long browsers keep to HTTPS (s)",
        "",
    ),
    "DJANGO_BEHIND_PROXY": (
        "`1` when a TLS proxy in front sets `X-Forwarded-Proto` (ignored otherwise)",
        "",
    ),
    "DJANGO_LOG_LEVEL": ("the root logger's level", ""),
    "DATABASE_POOLER": (
        "`transaction` when PgBouncer (or another pooler) in transaction pooling stands between "
        "the processes and PostgreSQL; `none` otherwise",
        "",
    ),
    "DATABASE_POOL_MAX_SIZE": (
        "**web processes only**: their requests share a pool of at most this many connections "
        "(Django's psycopg pool); beats and workers refuse to start with it "
        "([connections](connections.md))",
        "no pool; `make run` and compose set it for the web",
    ),
    "DATABASE_POOL_TIMEOUT": (
        "how long a request waits for one of the pool's connections before it is answered "
        "`503` (s)",
        "",
    ),
    "JOBS_MODULES": (
        "extra modules to import so their jobs register",
        "`make run` adds `demo.jobs`",
    ),
    "JOBS_BEAT_MAX_INTERVAL": (
        "longest beat sleep, so the longest edit-to-pickup delay (s)",
        "",
    ),
    "JOBS_MAINTENANCE_INTERVAL": (
        "how often each beat tries a maintenance pass (one beat at a time does it) (s)",
        "",
    ),
    "JOBS_REPUBLISH_AFTER": (
        "a run still `scheduled` this long after its message went out is published again (s)",
        "",
    ),
    "JOBS_BULK_PUBLISH": (
        "`0`: a burst (more than 100 runs at once) is sent one `send_task` per run instead of "
        "in bulk",
        "",
    ),
    "JOBS_BEAT_TEST_CLOCK_OFFSET": (
        "**testing only**: shifts this beat's clock by N seconds, to simulate node clock skew",
        "",
    ),
    "JOBS_NODE_HEARTBEAT": (
        "seconds between a worker node's heartbeats (at least 0.5); 3 missed make it dead, and "
        "a continuous job's lease lasts 3 of them",
        "",
    ),
    "JOBS_VISIBILITY_TIMEOUT": ("Redis redelivery timeout for unacknowledged messages (s)", ""),
    "JOBS_BROKER_SENTINEL_MASTER": (
        "with a `sentinel://…` broker: the master's name in the sentinels' `sentinel monitor` "
        '(`broker_transport_options["master_name"]`)',
        "",
    ),
    "JOBS_BROKER_SENTINEL_PASSWORD": (
        "with a `sentinel://…` broker: the sentinels' own password (`sentinel_kwargs`)",
        "",
    ),
    "FLOWER_URL": (
        "where the admin links each run's task in Flower; empty: no link",
        "set by `make run` and compose",
    ),
    "JOBS_PUBLIC_URL": (
        "this deployment's address, for the admin links of alerts, e.g. `https://jobs.example.com`",
        "alerts without links (`manage.py check` warns)",
    ),
    "JOBS_METRICS_ALLOW_FROM": (
        "addresses/networks (CIDR) that may read `/metrics` and the probes' details without a "
        "token",
        "",
    ),
    "JOBS_BEAT_HEARTBEAT_INTERVAL": ("a beat's heartbeat period (s)", ""),
    "JOBS_BEAT_STALE_AFTER": ("the silence after which `/healthz` counts a beat gone (s)", ""),
    "JOBS_RETENTION_<STATUS>": (
        "how long finished runs are kept, e.g. `JOBS_RETENTION_FAILED=90d`; `forever`",
        "",
    ),
    "JOBS_RETENTION_INTERVAL": ("how often maintenance prunes (s)", ""),
    "JOBS_RUN_LOG": (
        "`0`: runs keep no log of their own (what their code logs and prints is not captured)",
        "",
    ),
    "JOBS_RUN_LOG_LEVEL": (
        "the lowest level of a run's `logging` lines kept with it (`DEBUG`, `INFO`, `WARNING`, "
        "`ERROR`, `CRITICAL`); `@job(log_level=...)` sets a job's own",
        "",
    ),
    "JOBS_RUN_LOG_MAX_LINES": (
        "at most this many lines kept per run: its first and last halves, a line saying how many "
        "were cut between",
        "",
    ),
    "JOBS_RUN_LOG_MAX_LINE_CHARS": ("a longer line of a run's log is cut to this length", ""),
    "JOBS_RUN_LOG_FLUSH_SECONDS": (
        "how often a running run's new lines are written (s): a worker killed -9 loses at most "
        "about this much of its run's log",
        "",
    ),
    "JOBS_RETENTION_VACUUM": (
        "`0`: a pruning pass that deleted runs does not `VACUUM` the run and lease tables "
        "afterwards (leave it to autovacuum)",
        "",
    ),
    "JOBS_LOG_FORMAT": ("`plain` or `json` (one object per line)", ""),
    "EMAIL_HOST": ("Django's: the SMTP server alert e-mails go through", ""),
    "EMAIL_PORT": ("Django's: its port", ""),
    "EMAIL_HOST_USER": ("Django's: the SMTP user", ""),
    "EMAIL_HOST_PASSWORD": ("Django's: the SMTP password", ""),
    "EMAIL_USE_TLS": ("Django's: `1` for STARTTLS", ""),
    "EMAIL_TIMEOUT": ("Django's: the SMTP timeout (s)", ""),
    "DEFAULT_FROM_EMAIL": ("Django's: the sender of alert e-mails", ""),
}


@dataclass(frozen=True)
class Outside:
    """A variable read by ``make run`` or compose, not by the settings."""

    meaning: str
    default: str
    read_by: tuple[str, ...]  # files that must name it


OUTSIDE: Mapping[str, Outside] = {
    "FLOWER_BASIC_AUTH": Outside(
        "`user:password` for Flower",
        "generated by `make run`; compose requires it",
        ("devtools/__main__.py", "docker/compose.yaml"),
    ),
    "WEB_DATABASE_POOL_MAX_SIZE": Outside(
        "`make run` and compose: the web's `DATABASE_POOL_MAX_SIZE` (compose: per gunicorn "
        "process)",
        "`8`, `4`",
        ("devtools/__main__.py", "docker/compose.yaml"),
    ),
    "WEB_PORT": Outside(
        "the port `make run` (and compose) serve the web on",
        "`8000`",
        ("devtools/__main__.py", "docker/compose.yaml"),
    ),
    "FLOWER_PORT": Outside(
        "the port `make run` (and compose) serve Flower on",
        "`5555`",
        ("devtools/__main__.py", "docker/compose.yaml"),
    ),
    "WEB_BIND": Outside(
        "compose: the host address the web port is published on",
        "`127.0.0.1`",
        ("docker/compose.yaml",),
    ),
    "FLOWER_BIND": Outside(
        "compose: the host address the Flower port is published on",
        "`127.0.0.1`",
        ("docker/compose.yaml",),
    ),
}


# --- the settings' environment variables, from project/settings.py's source ------------------

KINDS = {
    "str": "text",
    "required": "text, required",
    "bool": "`1` / `0`",
    "int": "integer",
    "float": "number",
    "list": "comma-separated list",
}


@dataclass(frozen=True)
class Variable:
    name: str
    kind: str
    default: str  # as the docs show it; "" when the code computes it
    minimum: str


def _name(node: ast.expr) -> str:
    """``"NAME"``, or ``f"JOBS_RETENTION_{status.upper()}"`` as ``JOBS_RETENTION_<STATUS>``."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        parts = []
        for value in node.values:
            if isinstance(value, ast.Constant):
                parts.append(str(value.value))
            else:
                names = [n.id for n in ast.walk(value) if isinstance(n, ast.Name)]
                parts.append(f"<{names[0].upper()}>" if names else "<VALUE>")
        return "".join(parts)
    raise StaleReference(f"{SETTINGS.name}:{node.lineno}: a variable name that is no string")


def _shown(value: object, kind: str) -> str:
    if kind == "bool":
        return "`1`" if value else "`0`"
    if value is None or value == "" or value == []:
        return "none"
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, list):
        return ", ".join(f"`{item}`" for item in value)
    return f"`{value}`"


def settings_variables(source: str | None = None) -> list[Variable]:
    """Every ``env.<kind>(...)`` call of project/settings.py, in the order it reads them."""
    tree = ast.parse(SETTINGS.read_text() if source is None else source)
    found: dict[str, Variable] = {}
    calls = [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and isinstance(node.func.value, ast.Name)
        and node.func.value.id == "env"
    ]
    for call in sorted(calls, key=lambda node: (node.lineno, node.col_offset)):
        assert isinstance(call.func, ast.Attribute)
        kind = call.func.attr
        if kind not in KINDS:
            raise StaleReference(f"{SETTINGS.name}:{call.lineno}: env.{kind} is not known here")
        name = _name(call.args[0])
        keywords = {keyword.arg: keyword.value for keyword in call.keywords}
        default_node = keywords.get("default")
        if default_node is None and kind == "str" and len(call.args) > 1:
            default_node = call.args[1]
        if kind == "required":
            default = "required"
        elif default_node is None:
            default = _shown(None, kind)
        else:
            try:
                default = _shown(ast.literal_eval(default_node), kind)
            except ValueError:
                default = ""  # computed (e.g. per status, or depending on DJANGO_DEBUG)
        minimum_node = keywords.get("minimum")
        minimum = _shown(ast.literal_eval(minimum_node), kind) if minimum_node else ""
        found.setdefault(name, Variable(name, kind, default, minimum))
    return list(found.values())


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _meanings() -> dict[str, tuple[str, str]]:
    from jobs.alerts.channels import declared_settings

    declared = declared_settings().values()
    return {**MEANINGS, **{setting.name: (setting.meaning, setting.remark) for setting in declared}}


def _app_settings() -> dict[str, object]:
    """The ``jobs`` app's settings and their defaults: ``jobs.conf``'s, the channels' own."""
    from jobs.alerts.channels import declared_settings
    from jobs.conf import DEFAULTS

    declared = declared_settings().values()
    return {**DEFAULTS, **{setting.name: setting.default for setting in declared}}


def configuration_reference() -> str:
    from jobs.conf import RETENTION_DEFAULTS

    meanings = _meanings()
    variables = settings_variables()
    read = {variable.name for variable in variables}
    undocumented = sorted(read - set(meanings))
    if undocumented:
        raise StaleReference(
            f"project/settings.py reads {', '.join(undocumented)}, which "
            "devtools/docs_reference.py's MEANINGS does not describe"
        )
    stale = sorted(set(meanings) - read)
    if stale:
        raise StaleReference(
            f"devtools/docs_reference.py's MEANINGS describes {', '.join(stale)}, which "
            "project/settings.py no longer reads"
        )
    for name, outside in OUTSIDE.items():
        for path in outside.read_by:
            if name not in (ROOT / path).read_text():
                raise StaleReference(
                    f"{path} no longer names {name} (devtools/docs_reference.py's OUTSIDE)"
                )

    retention = "; ".join(
        f"`{age}` for {', '.join(s for s, a in RETENTION_DEFAULTS.items() if a == age)}"
        for age in dict.fromkeys(RETENTION_DEFAULTS.values())
    )
    lines = [
        "### Environment variables of the settings",
        "",
        "Read by `project/settings.py` (through `project/env.py`).",
        "",
        "| variable | meaning | value | default |",
        "| --- | --- | --- | --- |",
    ]
    for variable in variables:
        meaning, remark = meanings[variable.name]
        default = variable.default
        if variable.name == "JOBS_RETENTION_<STATUS>":
            default = retention
        default = "; ".join(part for part in (default, remark) if part)
        value = KINDS[variable.kind] + (
            f", at least {variable.minimum}" if variable.minimum else ""
        )
        lines.append(
            f"| `{variable.name}` | {_cell(meaning)} | {_cell(value)} | {_cell(default)} |"
        )
    lines += [
        "",
        "### Environment variables of `make run` and compose",
        "",
        "| variable | meaning | default | read by |",
        "| --- | --- | --- | --- |",
    ]
    for name, outside in OUTSIDE.items():
        files = ", ".join(f"`{path}`" for path in outside.read_by)
        lines.append(
            f"| `{name}` | {_cell(outside.meaning)} | {_cell(outside.default)} | {files} |"
        )
    lines += [
        "",
        "### Settings of the `jobs` app",
        "",
        "What the app reads from Django settings, with the default it assumes when a project sets",
        "nothing (`jobs.conf.DEFAULTS`, and each alert channel's `settings`); this repository's",
        "settings read each from the variable named.",
        "",
        "| setting | default | variable here |",
        "| --- | --- | --- |",
    ]
    for setting, app_default in _app_settings().items():
        matches = [v.name for v in variables if v.name == setting] or [
            v.name for v in variables if v.name.startswith(f"{setting}_<")
        ]
        if not matches:
            raise StaleReference(
                f"jobs/conf.py's setting {setting} is read from no variable of project/settings.py"
            )
        shown = repr(dict(app_default) if isinstance(app_default, Mapping) else app_default)
        lines.append(f"| `{setting}` | `{_cell(shown)}` | `{matches[0]}` |")
    return "\n".join(lines) + "\n"


# --- the CLI, from the argparse definitions ----------------------------------------------------


def _verbs(parser: argparse.ArgumentParser) -> Iterator[tuple[str, argparse.ArgumentParser]]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            yield from action.choices.items()


def _help_block(parser: argparse.ArgumentParser) -> list[str]:
    return ["```text", parser.format_help().rstrip(), "```", ""]


def cli_reference_here() -> str:
    """In a process whose Django is set up (``cli_reference`` starts one)."""
    import django

    django.setup()
    from jobs.management.commands.jobs import Command

    parser = Command().create_parser("manage.py", "jobs")
    lines = ["### `manage.py jobs`", "", *_help_block(parser)]
    for verb, verb_parser in _verbs(parser):
        lines += [f"### `jobs {verb}`", "", *_help_block(verb_parser)]
        for action, action_parser in _verbs(verb_parser):
            lines += [f"#### `jobs {verb} {action}`", "", *_help_block(action_parser)]
    return "\n".join(lines)


def cli_reference() -> str:
    """The CLI's help, printed by a Django process of its own on fixed settings and width, so
    neither the machine that builds the site nor its environment changes a character."""
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "project.settings",
        "DJANGO_DEBUG": "1",
        "DATABASE_URL": "postgresql://unused@localhost/unused",
        "CELERY_BROKER_URL": "redis://localhost/0",
        "JOBS_MODULES": "",
        "COLUMNS": "100",
    }
    done = subprocess.run(
        [sys.executable, "-m", "devtools.docs_reference", "cli"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    if done.returncode:
        raise StaleReference(f"the CLI reference could not be made:\n{done.stderr}")
    return done.stdout


REFERENCES = {"cli": cli_reference, "configuration": configuration_reference}


# --- the MkDocs hook ---------------------------------------------------------------------------

_placed: set[str] = set()


def on_pre_build(config: Any) -> None:
    # The references import the project (jobs.conf), wherever mkdocs was started from.
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    _placed.clear()


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    from mkdocs.exceptions import PluginError

    def place(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in REFERENCES:
            raise PluginError(f"{page.file.src_path}: no reference named {name!r}")
        _placed.add(name)
        try:
            return REFERENCES[name]()
        except StaleReference as exc:
            raise PluginError(f"the {name} reference: {exc}") from None

    return MARKER.sub(place, markdown)


def on_post_build(config: Any) -> None:
    from mkdocs.exceptions import PluginError

    missing = sorted(set(REFERENCES) - _placed)
    if missing:
        raise PluginError(f"no page holds <!-- reference: {missing[0]} -->")


if __name__ == "__main__":
    print(cli_reference_here() if sys.argv[1:] == ["cli"] else REFERENCES[sys.argv[1]]())
