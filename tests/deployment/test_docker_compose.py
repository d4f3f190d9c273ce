"""docker/compose.yaml and docker/Dockerfile agree with the code they run.

No Docker engine is needed (nor called): the files are parsed and compared with the source tree,
so a new required setting, a renamed module or a literal password breaks this test.
"""

from __future__ import annotations

import ast
import json
import re
import shlex
import tomllib
from functools import cache
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
DOCKER_DIR = ROOT / "docker"
COMPOSE_FILE = DOCKER_DIR / "compose.yaml"
DOCKERFILE = DOCKER_DIR / "Dockerfile"
SETTINGS_FILE = ROOT / "project" / "settings.py"

EXPECTED_SERVICES = {
    "postgres",
    "redis",
    "migrate",
    "web",
    "beat-1",
    "beat-2",
    "worker-1",
    "worker-2",
    "worker-3",
    "flower",
}
SECRET_NAME = re.compile(r"SECRET|PASSWORD|BASIC_AUTH")
# ${NAME}, ${NAME:-default}, ${NAME-default}, ${NAME:?message}, ${NAME?message}, ${NAME:+alt}
INTERPOLATION = re.compile(
    r"\$\{(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?:(?P<op>:?[-?+])(?P<arg>[^}]*))?\}"
)
FALSY = {"0", "false", "no", "off"}


# --- loading -------------------------------------------------------------------------------
@cache
def compose() -> dict[str, Any]:
    data = yaml.safe_load(COMPOSE_FILE.read_text())
    assert isinstance(data, dict), "compose.yaml is not a mapping"
    return data


def services() -> dict[str, dict[str, Any]]:
    return compose()["services"]


def environment(service: dict[str, Any]) -> dict[str, str]:
    raw = service.get("environment") or {}
    if isinstance(raw, list):
        pairs = (item.split("=", 1) if "=" in item else (item, "") for item in raw)
        return {name: value for name, value in pairs}
    return {name: "" if value is None else str(value) for name, value in raw.items()}


def command(service: dict[str, Any]) -> list[str]:
    raw = service.get("command") or []
    return shlex.split(raw) if isinstance(raw, str) else [str(part) for part in raw]


def is_app(service: dict[str, Any]) -> bool:
    """Built from our Dockerfile (the context is resolved relative to the compose file)."""
    build = service.get("build")
    if build is None:
        return False
    if isinstance(build, str):
        build = {"context": build}
    context = (DOCKER_DIR / build.get("context", ".")).resolve()
    return (context / build.get("dockerfile", "Dockerfile")).resolve() == DOCKERFILE


def app_services() -> dict[str, dict[str, Any]]:
    return {name: svc for name, svc in services().items() if is_app(svc)}


def celery_services(subcommand: str) -> dict[str, list[str]]:
    found = {}
    for name, svc in services().items():
        argv = command(svc)
        if argv[:1] == ["celery"] and subcommand in argv[1:4]:
            found[name] = argv
    return found


def option(argv: list[str], short: str | None, long: str) -> str | None:
    """The value of ``-n X`` / ``-nX`` / ``--hostname X`` / ``--hostname=X`` in argv."""
    for i, arg in enumerate(argv):
        if arg == long or (short is not None and arg == short):
            return argv[i + 1] if i + 1 < len(argv) else None
        if arg.startswith(long + "="):
            return arg.split("=", 1)[1]
        if short is not None and arg.startswith(short) and len(arg) > len(short):
            return arg[len(short) :]
    return None


def resolve(value: str, given: dict[str, str] | None = None) -> str:
    """Compose interpolation with an empty environment: defaults apply, required names get a
    placeholder (``given`` or ``x``), so the result can be parsed like the real value."""
    given = given or {}

    def substitute(match: re.Match[str]) -> str:
        name, op, arg = match.group("name"), match.group("op"), match.group("arg")
        if name in given:
            return given[name]
        if op in (":-", "-"):
            return arg
        if op in (":+", "+"):
            return ""
        return "x"

    return INTERPOLATION.sub(substitute, value).replace("$$", "$")


def is_required_interpolation(value: str) -> bool:
    """The whole value is ``${NAME:?msg}`` or ``${NAME?msg}``: no default, no literal."""
    match = INTERPOLATION.fullmatch(value)
    return match is not None and match.group("op") in (":?", "?")


# --- what the settings require, derived from their source -----------------------------------
@cache
def required_settings_variables() -> frozenset[str]:
    """``env.required("NAME", ...)`` calls, plus every ``NAME is not set`` error the settings
    raise (DJANGO_SECRET_KEY and DJANGO_ALLOWED_HOSTS when DJANGO_DEBUG is off)."""
    tree = ast.parse(SETTINGS_FILE.read_text(), filename=str(SETTINGS_FILE))
    names: set[str] = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        if (
            isinstance(func, ast.Attribute)
            and func.attr == "required"
            and isinstance(func.value, ast.Name)
            and func.value.id == "env"
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            names.add(node.args[0].value)
        elif isinstance(func, ast.Name) and func.id == "ImproperlyConfigured" and node.args:
            message = node.args[0]
            if isinstance(message, ast.JoinedStr) and message.values:
                message = message.values[0]
            if isinstance(message, ast.Constant) and isinstance(message.value, str):
                match = re.match(r"([A-Z][A-Z0-9_]+) is not set\b", message.value)
                if match:
                    names.add(match.group(1))
    return frozenset(names)


def test_settings_scan_finds_the_known_required_variables() -> None:
    # Guards the scanner itself: if the settings change shape, it must not find nothing.
    assert {
        "DATABASE_URL",
        "CELERY_BROKER_URL",
        "DJANGO_SECRET_KEY",
        "DJANGO_ALLOWED_HOSTS",
    } <= required_settings_variables()


# --- services ------------------------------------------------------------------------------
def test_expected_services_exist() -> None:
    missing = EXPECTED_SERVICES - set(services())
    assert not missing, f"compose.yaml lacks services: {sorted(missing)}"


def test_app_services_are_built_from_our_dockerfile() -> None:
    apps = set(app_services())
    expected = EXPECTED_SERVICES - {"postgres", "redis"}
    assert expected <= apps, f"not built from docker/Dockerfile: {sorted(expected - apps)}"
    assert "postgres" not in apps and "redis" not in apps


def test_two_beats_and_three_workers_with_distinct_node_names() -> None:
    beats = celery_services("beat")
    workers = celery_services("worker")
    assert sorted(beats) == ["beat-1", "beat-2"]
    assert sorted(workers) == ["worker-1", "worker-2", "worker-3"]
    for name, argv in {**beats, **workers}.items():
        assert argv[1:3] == ["-A", "project"], f"{name}: {argv} is not `celery -A project ...`"
    node_names = {name: option(argv, "-n", "--hostname") for name, argv in workers.items()}
    assert all(node_names.values()), f"every worker needs -n: {node_names}"
    assert len(set(node_names.values())) == len(node_names), f"duplicate -n: {node_names}"


@pytest.mark.parametrize("name", sorted(EXPECTED_SERVICES - {"postgres", "redis"}))
def test_app_service_sets_every_required_variable(name: str) -> None:
    env = environment(services()[name])
    missing = required_settings_variables() - {k for k, v in env.items() if v != ""}
    assert not missing, f"{name} lacks {sorted(missing)} (required by project/settings.py)"
    assert "JOBS_MODULES" in env, f"{name} does not set JOBS_MODULES"


def test_only_the_web_has_a_connection_pool() -> None:
    """The web's connection budget (docs/connections.md): a pool per gunicorn process, its size from
    WEB_DATABASE_POOL_MAX_SIZE; beats and workers refuse one (jobs.database.connection_budget)."""
    for name, svc in app_services().items():
        pool = environment(svc).get("DATABASE_POOL_MAX_SIZE")
        if name == "web":
            assert pool == "${WEB_DATABASE_POOL_MAX_SIZE:-4}"
            assert int(resolve(pool)) >= 1
        else:
            assert pool is None, f"{name} must keep its own connections, not a pool"


def test_every_app_service_runs_with_debug_off() -> None:
    for name, svc in app_services().items():
        env = environment(svc)
        assert "DJANGO_DEBUG" in env, f"{name} does not set DJANGO_DEBUG"
        assert resolve(env["DJANGO_DEBUG"]).strip().lower() in FALSY, f"{name}: DEBUG is on"


def test_ssl_redirect_is_off_for_the_plain_http_stack() -> None:
    for name, svc in app_services().items():
        value = environment(svc).get("DJANGO_SECURE_SSL_REDIRECT", "")
        assert resolve(value).strip().lower() in FALSY, f"{name} would redirect to HTTPS"


def module_file(module: str) -> str | None:
    """The repository file of a dotted module name, or None when it is not in the repo."""
    path = Path(*module.strip().split("."))
    for candidate in (path.with_suffix(".py"), path / "__init__.py"):
        if (ROOT / candidate).is_file():
            return candidate.as_posix()
    return None


def in_image(path: str) -> bool:
    return any(path == src or path.startswith(src.rstrip("/") + "/") for src in copied())


def test_jobs_modules_exist_and_are_in_the_image() -> None:
    for name, svc in app_services().items():
        for module in filter(None, resolve(environment(svc)["JOBS_MODULES"]).split(",")):
            path = module_file(module)
            assert path, f"{name}: JOBS_MODULES names {module!r}, which is not in the repository"
            assert in_image(path), f"{name}: JOBS_MODULES names {path}, not copied to the image"


def test_local_installed_apps_are_in_the_image() -> None:
    tree = ast.parse(SETTINGS_FILE.read_text())
    apps: list[str] = []
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "INSTALLED_APPS" for t in node.targets
        ):
            apps = [str(app) for app in ast.literal_eval(node.value)]
    assert apps, "INSTALLED_APPS not found in project/settings.py"
    for app in apps:
        path = module_file(app.split(".apps.")[0])
        if path is not None:  # a local app, not a third-party package
            assert in_image(path), f"INSTALLED_APPS has {app!r}, which the image does not copy"


def url_password(value: str) -> str | None:
    """The raw password of ``scheme://user:password@host...``, interpolations kept intact."""
    pieces = [m.group(0) for m in INTERPOLATION.finditer(value)]
    masked = INTERPOLATION.sub(lambda m: f"\0{pieces.index(m.group(0))}\0", value)
    if "://" not in masked:
        return None
    netloc = re.split(r"[/?#]", masked.split("://", 1)[1], maxsplit=1)[0]
    userinfo, at, _host = netloc.rpartition("@")
    if not at or ":" not in userinfo:
        return None
    password = userinfo.split(":", 1)[1]
    return re.sub(r"\0(\d+)\0", lambda m: pieces[int(m.group(1))], password)


def test_url_password_extraction() -> None:
    url = "postgresql://${U:-jobs}:${P:?set P}@postgres:5432/${D:-jobs}"
    assert url_password(url) == "${P:?set P}"
    assert url_password("postgresql://jobs:hunter2@postgres/jobs") == "hunter2"
    assert url_password("redis://redis:6379/0") is None


def test_no_literal_secrets() -> None:
    for name, svc in services().items():
        for key, value in environment(svc).items():
            if SECRET_NAME.search(key):
                assert is_required_interpolation(value), (
                    f"{name}: {key} must come from the environment as ${{{key}:?...}}, "
                    f"not {value!r}"
                )
            password = url_password(value)
            if password is not None:
                assert is_required_interpolation(password), (
                    f"{name}: {key} embeds a literal password in a URL"
                )
    # Anywhere in the file (commands, healthchecks, ...): a secret never gets a default.
    text = COMPOSE_FILE.read_text()
    for match in INTERPOLATION.finditer(text):
        if SECRET_NAME.search(match.group("name")):
            assert match.group("op") in (":?", "?"), f"{match.group(0)} must be required (:?)"


def test_urls_point_at_the_compose_services() -> None:
    for name, svc in app_services().items():
        env = environment(svc)
        database = urlsplit(resolve(env["DATABASE_URL"]))
        assert database.scheme.startswith("postgres"), f"{name}: DATABASE_URL is not PostgreSQL"
        assert database.hostname == "postgres", f"{name}: DATABASE_URL host {database.hostname}"
        broker = urlsplit(resolve(env["CELERY_BROKER_URL"]))
        assert broker.scheme == "redis", f"{name}: CELERY_BROKER_URL is not Redis"
        assert broker.hostname == "redis", f"{name}: broker host {broker.hostname}"


def test_database_credentials_match_postgres() -> None:
    pg_env = environment(services()["postgres"])
    pg = {key: resolve(value) for key, value in pg_env.items()}
    for name, svc in app_services().items():
        url = urlsplit(resolve(environment(svc)["DATABASE_URL"]))
        assert url.username == pg.get("POSTGRES_USER", "postgres"), name
        assert url.path.lstrip("/") == pg.get("POSTGRES_DB", url.username), name
    # Same variable on both sides, so they cannot drift apart.
    url_text = environment(services()["web"])["DATABASE_URL"]
    assert pg_env["POSTGRES_PASSWORD"] in url_text


def depends_on(service: dict[str, Any]) -> dict[str, dict[str, Any]]:
    raw = service.get("depends_on") or {}
    if isinstance(raw, list):
        return {name: {"condition": "service_started"} for name in raw}
    return raw


@pytest.mark.parametrize("name", ["web", "beat-1", "beat-2", "worker-1", "worker-2", "worker-3"])
def test_processes_wait_for_migrations(name: str) -> None:
    deps = depends_on(services()[name])
    assert deps.get("migrate", {}).get("condition") == "service_completed_successfully", (
        f"{name} must depend on migrate completing: {deps}"
    )


def test_migrate_is_a_one_shot_after_a_healthy_postgres() -> None:
    migrate = services()["migrate"]
    assert command(migrate)[:3] == ["python", "manage.py", "migrate"]
    assert "--noinput" in command(migrate)
    assert depends_on(migrate).get("postgres", {}).get("condition") == "service_healthy"
    assert "migrate" not in depends_on(migrate)
    # A restarting one-shot never "completes", and everything waits on it.
    assert str(migrate.get("restart", "no")) in {"no", "on-failure"}


def healthcheck_text(service: dict[str, Any]) -> str:
    test = (service.get("healthcheck") or {}).get("test", [])
    return " ".join(test) if isinstance(test, list) else str(test)


def test_postgres_and_redis() -> None:
    postgres, redis = services()["postgres"], services()["redis"]
    assert str(postgres["image"]).startswith("postgres:16")
    assert "pg_isready" in healthcheck_text(postgres)
    named = set(compose().get("volumes") or {})
    sources = {str(v).split(":", 1)[0] for v in postgres.get("volumes", [])}
    assert sources & named, "postgres data must live in a named volume"
    assert str(redis["image"]).startswith("redis:7")
    assert "redis-cli" in healthcheck_text(redis) and "ping" in healthcheck_text(redis)
    for name in ("migrate", "web"):
        deps = depends_on(services()[name])
        assert deps.get("postgres", {}).get("condition") == "service_healthy", name


def test_flower_publishes_5555_with_basic_auth() -> None:
    flower = services()["flower"]
    argv = command(flower)
    assert argv[:4] == ["celery", "-A", "project", "flower"]
    assert option(argv, None, "--port") in (None, "5555")
    published = [str(port).rsplit(":", 1)[-1].split("/")[0] for port in flower.get("ports", [])]
    assert "5555" in published, f"flower ports: {flower.get('ports')}"
    assert is_required_interpolation(environment(flower).get("FLOWER_BASIC_AUTH", ""))


def test_flower_keeps_its_state_in_a_named_volume_its_user_can_write() -> None:
    flower = services()["flower"]
    argv = command(flower)
    assert option(argv, None, "--persistent") == "True"
    db = option(argv, None, "--db")
    assert db is not None and db.startswith("/")
    mounts = dict(str(v).split(":", 1) for v in flower.get("volumes", []))
    named = set(compose().get("volumes") or {})
    state_dirs = [target for source, target in mounts.items() if source in named]
    assert [target for target in state_dirs if db.startswith(target.rstrip("/") + "/")], mounts
    # A new named volume takes the owner of the image's directory: it must be the runtime user.
    runs = [args for instruction, args in dockerfile_instructions() if instruction == "RUN"]
    state_dir = db.rsplit("/", 1)[0]
    assert any(f"install -d -o app -g app {state_dir}" in args for args in runs), runs


def test_web_publishes_its_port() -> None:
    web = services()["web"]
    published = [str(port).rsplit(":", 1)[-1].split("/")[0] for port in web.get("ports", [])]
    bind = option(command(web), "-b", "--bind") or "0.0.0.0:8000"
    assert bind.rsplit(":", 1)[-1] in published


def published_host_addresses(service: dict[str, Any], given: dict[str, str]) -> list[str]:
    """The host address of each published port, ``HOST_IP:HOST_PORT:CONTAINER_PORT``; a port
    given without one is published on every interface."""
    addresses = []
    for port in service.get("ports", []):
        parts = resolve(str(port), given).split(":")
        addresses.append(parts[0] if len(parts) == 3 else "0.0.0.0")
    return addresses


@pytest.mark.parametrize(("name", "variable"), [("web", "WEB_BIND"), ("flower", "FLOWER_BIND")])
def test_ports_are_published_on_loopback_unless_told_otherwise(name: str, variable: str) -> None:
    service = services()[name]
    assert service.get("ports"), f"{name} publishes no port"
    assert set(published_host_addresses(service, {})) == {"127.0.0.1"}
    opened = published_host_addresses(service, {variable: "0.0.0.0"})
    assert set(opened) == {"0.0.0.0"}, f"{variable} does not choose {name}'s address"


def test_the_forwarded_proto_header_is_not_trusted_by_default() -> None:
    for name, svc in app_services().items():
        value = resolve(environment(svc).get("DJANGO_BEHIND_PROXY", "0"))
        assert value.strip().lower() in FALSY, f"{name}: DJANGO_BEHIND_PROXY is on by default"


# --- the commands point at code that exists (and is in the image) ---------------------------
def referenced_paths() -> set[str]:
    """Repository files the compose commands need, e.g. project/celery.py, manage.py."""
    paths: set[str] = set()
    for name, svc in app_services().items():
        argv = command(svc) or dockerfile_cmd()
        if argv[0] == "celery":
            app = option(argv, "-A", "--app")
            assert app, f"{name}: celery without -A"
            package = Path(*app.split(":")[0].split("."))
            paths.add(str(package / "celery.py"))
        elif argv[0] == "python" and argv[1].endswith(".py"):
            paths.add(argv[1])
        elif argv[0] == "gunicorn":
            target = next(arg for arg in argv[1:] if not arg.startswith("-"))
            paths.add(str(Path(*target.split(":")[0].split("."))) + ".py")
        else:
            pytest.fail(f"{name}: unexpected command {argv}")
    return paths


def test_commands_point_at_existing_modules() -> None:
    paths = referenced_paths()
    assert {"project/celery.py", "manage.py"} <= paths
    for path in paths:
        assert (ROOT / path).is_file(), f"compose runs {path}, which does not exist"
    assert re.search(r"^app\s*=\s*Celery\(", (ROOT / "project/celery.py").read_text(), re.M)
    for path in paths:
        assert in_image(path), f"{path} is not copied into the image"


def platform_dependencies() -> list[str]:
    """What the image runs on: the app's dependencies and the platform extra (web server,
    Flower, broker client), as requirements/base.txt pins them."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return [*project["dependencies"], *project["optional-dependencies"]["platform"]]


def test_server_programs_are_dependencies() -> None:
    deps = platform_dependencies()
    declared = {re.split(r"[\[<>=!~; ]", dep, maxsplit=1)[0].lower() for dep in deps}
    for name, svc in app_services().items():
        argv = command(svc) or dockerfile_cmd()
        program = "flower" if argv[:1] == ["celery"] and "flower" in argv else argv[0]
        if program != "python":
            assert program in declared, f"{name} runs {program}, not in pyproject dependencies"


def test_base_requirements_pin_every_dependency() -> None:
    """The image installs requirements/base.txt with --no-deps: it must pin everything."""

    def normalize(name: str) -> str:
        return re.sub(r"[-_.]+", "-", name).lower()

    deps = platform_dependencies()
    declared = {normalize(re.split(r"[\[<>=!~; ]", dep, maxsplit=1)[0]) for dep in deps}
    pinned = {
        normalize(line.split("==", 1)[0])
        for line in (ROOT / "requirements" / "base.txt").read_text().splitlines()
        if "==" in line and not line.lstrip().startswith("#")
    }
    missing = declared - pinned
    assert not missing, f"requirements/base.txt lacks {sorted(missing)}: run `make lock`"


# --- Dockerfile ----------------------------------------------------------------------------
@cache
def dockerfile_instructions() -> tuple[tuple[str, str], ...]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    instructions: list[tuple[str, str]] = []
    pending = ""
    for line in DOCKERFILE.read_text().splitlines():
        stripped = line.strip()
        if not pending and (not stripped or stripped.startswith("#")):
            continue
        if pending and stripped.startswith("#"):
            continue
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        full = pending + stripped
        pending = ""
        keyword, _, args = full.partition(" ")
        instructions.append((keyword.upper(), args.strip()))
    return tuple(instructions)


def dockerfile_args(args: str) -> list[str]:
    if args.startswith("["):
        return [str(part) for part in json.loads(args)]
    return shlex.split(args)


def dockerfile_cmd() -> list[str]:
    cmds = [args for keyword, args in dockerfile_instructions() if keyword == "CMD"]
    assert cmds, "the Dockerfile has no CMD"
    return dockerfile_args(cmds[-1])


@cache
def copied() -> tuple[str, ...]:
    """Repository paths the Dockerfile COPYs (sources of local COPY/ADD instructions)."""
    sources: list[str] = []
    for keyword, args in dockerfile_instructions():
        if keyword not in ("COPY", "ADD"):
            continue
        parts = dockerfile_args(args)
        if any(part.startswith("--from") for part in parts):
            continue
        parts = [part for part in parts if not part.startswith("--")]
        sources.extend(part.removeprefix("./") for part in parts[:-1])
    return tuple(sources)


def test_dockerfile_base_image_is_python_311() -> None:
    froms = [args for keyword, args in dockerfile_instructions() if keyword == "FROM"]
    assert froms and re.match(r"python:3\.11\b", froms[-1]), froms


def test_dockerfile_installs_the_pinned_requirements() -> None:
    copy_dest = None
    for keyword, args in dockerfile_instructions():
        parts = dockerfile_args(args) if keyword == "COPY" else []
        if "requirements/base.txt" in parts[:-1] or "requirements" in parts[:-1]:
            copy_dest = parts[-1]
    assert copy_dest, "requirements/base.txt is not copied into the image"
    runs = " ".join(args for keyword, args in dockerfile_instructions() if keyword == "RUN")
    assert re.search(r"pip install\b[^&;]*-r\s+\S*base\.txt", runs), "no pip install -r base.txt"
    assert "requirements/dev.txt" not in DOCKERFILE.read_text()


def test_dockerfile_does_not_run_as_root() -> None:
    users = [args for keyword, args in dockerfile_instructions() if keyword == "USER"]
    assert users, "the Dockerfile has no USER line"
    assert users[-1].split(":")[0] not in {"root", "0"}


def test_dockerfile_copies_only_existing_files() -> None:
    assert copied()
    for source in copied():
        assert list(ROOT.glob(source)), f"the Dockerfile copies {source}, which does not exist"
        assert not source.startswith(".."), f"{source} is outside the build context"


def test_dockerfile_collects_static_files_with_throwaway_settings() -> None:
    runs = [args for keyword, args in dockerfile_instructions() if keyword == "RUN"]
    collect = [run for run in runs if "collectstatic" in run]
    assert collect, "the image does not run collectstatic"
    # The dummy values live in that RUN only, never in an ENV/ARG that would persist.
    persisted = " ".join(args for keyword, args in dockerfile_instructions() if keyword == "ENV")
    for name in required_settings_variables():
        assert f"{name}=" in collect[0], f"collectstatic needs {name} at import"
        assert name not in persisted, f"{name} must not be baked into the image"
    # Production settings refuse a secret key shorter than 50 characters.
    key = re.search(r"DJANGO_SECRET_KEY=(\S+)", collect[0])
    assert key is not None and len(key.group(1)) >= 50, "the build's throw-away key is too short"


def test_dockerignore_keeps_local_state_out() -> None:
    patterns = {
        line.strip().rstrip("/")
        for line in (ROOT / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    }
    assert {".git", ".venv", ".dev", ".env"} <= patterns
