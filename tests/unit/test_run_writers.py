"""The run table's writers are the modules docs/architecture.md names ("Who writes a run"), each
for the moves it owns: a module that starts writing ``jobs_jobrun`` (in SQL or through the ORM)
is added there with what it writes, so a new writer is a decision, not an accident."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ARCHITECTURE = ROOT / "docs" / "architecture.md"
# Statements that change rows, in SQL text or as the ORM's writes on ``JobRun.objects``.
SQL_WRITE = re.compile(r"\b(INSERT\s+INTO|UPDATE|DELETE\s+FROM)\s+jobs_jobrun\b", re.IGNORECASE)
ORM_WRITES = {"create", "update", "delete", "bulk_create", "bulk_update", "get_or_create",
              "update_or_create"}  # fmt: skip


def _writes_runs(source: str) -> bool:
    if SQL_WRITE.search(source):
        return True
    for node in ast.walk(ast.parse(source)):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in ORM_WRITES
            and "JobRun.objects" in ast.unparse(node.func.value)
        ):
            return True
    return False


def _writers_in_code() -> set[str]:
    return {
        path.relative_to(ROOT).as_posix()
        for path in (ROOT / "jobs").rglob("*.py")
        if "migrations" not in path.parts and _writes_runs(path.read_text())
    }


def _writers_in_docs() -> set[str]:
    section = ARCHITECTURE.read_text().split("## Who writes a run", 1)[1].split("\n## ", 1)[0]
    return set(re.findall(r"^\| `(jobs/[\w/]+\.py)` \|", section, re.MULTILINE))


def test_the_modules_that_write_runs_are_the_ones_the_architecture_names() -> None:
    in_code, in_docs = _writers_in_code(), _writers_in_docs()
    assert in_docs, "the table in docs/architecture.md was not found"
    assert in_code == in_docs, (
        f"writing runs, not in the table: {sorted(in_code - in_docs)}; "
        f"in the table, writing no run: {sorted(in_docs - in_code)}"
    )


def test_a_writer_is_found_in_sql_text_and_in_the_orm() -> None:
    assert _writes_runs('SQL = """UPDATE jobs_jobrun SET folded = true"""')
    assert _writes_runs("JobRun.objects.filter(id__in=ids).delete()")
    assert _writes_runs("run = JobRun.objects.create(job=job)")
    assert not _writes_runs("JobRun.objects.filter(job=job).count()")
    assert not _writes_runs('SQL = "SELECT 1 FROM jobs_jobrun"')
