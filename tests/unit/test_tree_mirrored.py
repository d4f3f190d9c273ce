"""The tests mirror the tree: every module of ``jobs/`` with logic, ``jobs/<package>/<name>.py``,
has a test module ``test_<name>.py`` in one of the tiers (tests/unit, tests/integration,
tests/acceptance, sub-folders included), so its tests are found by its name.

Two explicit lists say which modules have none, and why. Each entry must still be true: a module
that is gone, or that got its test module, must leave its list."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TIERS = ("unit", "integration", "acceptance")
# Not modules of the app's own Python: schema history, SQL text, pages and static files.
NOT_PYTHON_MODULES = ("migrations", "sql", "templates", "static")

# Modules without logic of their own: nothing to test under their name.
WITHOUT_LOGIC = {
    # The AppConfig: ready() only calls what other modules define (conf's validation, the
    # registry's handlers, the signals' connections), each tested with its module.
    "jobs/apps.py",
    # URL patterns only.
    "jobs/urls.py",
    # The exception hierarchy: classes and their docstrings, no behaviour.
    "jobs/exceptions.py",
}

# Modules with logic that have no test module of their name yet (known debt, issue 30): each is
# exercised today by the tests named beside it; writing its own test module removes it here.
NOT_YET_MIRRORED: dict[str, str] = {}


def _modules() -> set[str]:
    """Every module of jobs/ as ``jobs/<package>/<name>.py``, packages' ``__init__`` aside."""
    found = set()
    for path in (ROOT / "jobs").rglob("*.py"):
        relative = path.relative_to(ROOT)
        if path.name == "__init__.py" or set(relative.parts) & set(NOT_PYTHON_MODULES):
            continue
        found.add(relative.as_posix())
    return found


def _test_module_names() -> set[str]:
    return {path.name for tier in TIERS for path in (ROOT / "tests" / tier).rglob("test_*.py")}


def _mirrored(module: str, test_names: set[str]) -> bool:
    return f"test_{Path(module).stem}.py" in test_names


def test_every_module_with_logic_has_a_test_module_of_its_name() -> None:
    test_names = _test_module_names()
    unmirrored = {
        module
        for module in _modules() - WITHOUT_LOGIC - set(NOT_YET_MIRRORED)
        if not _mirrored(module, test_names)
    }
    assert not unmirrored, (
        "write tests/<tier>/test_<name>.py for each (or, for a module without logic, add it to "
        f"WITHOUT_LOGIC and say why): {sorted(unmirrored)}"
    )


def test_the_lists_of_exceptions_name_only_modules_that_still_need_them() -> None:
    modules, test_names = _modules(), _test_module_names()
    listed = WITHOUT_LOGIC | set(NOT_YET_MIRRORED)
    assert listed <= modules, f"gone from jobs/: {sorted(listed - modules)}"
    assert not WITHOUT_LOGIC & set(NOT_YET_MIRRORED)
    now_mirrored = {module for module in NOT_YET_MIRRORED if _mirrored(module, test_names)}
    assert not now_mirrored, f"mirrored now, remove from NOT_YET_MIRRORED: {sorted(now_mirrored)}"
