"""Placement of continuous jobs: sticky, balanced, queue-aware, the same on every node."""

from __future__ import annotations

import math
from collections import Counter

from hypothesis import given
from hypothesis import strategies as st

from jobs.continuous.placement import plan

Q = frozenset({"default"})


def _loads(owner: dict[str, str], nodes: dict[str, frozenset[str]]) -> dict[str, int]:
    counts = Counter(owner.values())
    return {node: counts.get(node, 0) for node in nodes}


def test_free_jobs_spread_evenly() -> None:
    jobs = {f"job:{i}": "default" for i in range(6)}
    nodes = {"a": Q, "b": Q, "c": Q}
    assert sorted(_loads(plan(jobs, nodes, {}), nodes).values()) == [2, 2, 2]


def test_current_holders_keep_their_jobs_when_balanced() -> None:
    jobs = {f"job:{i}": "default" for i in range(6)}
    nodes = {"a": Q, "b": Q, "c": Q}
    holders = {"job:0": "c", "job:1": "c", "job:2": "a", "job:3": "a", "job:4": "b", "job:5": "b"}
    assert plan(jobs, nodes, holders) == holders


def test_a_joining_node_takes_one_job_and_nothing_else_moves() -> None:
    jobs = {f"job:{i}": "default" for i in range(6)}
    nodes = {"a": Q, "b": Q, "c": Q, "d": Q}
    holders = {"job:0": "a", "job:1": "a", "job:2": "b", "job:3": "b", "job:4": "c", "job:5": "c"}
    owner = plan(jobs, nodes, holders)
    assert sorted(_loads(owner, nodes).values()) == [1, 1, 2, 2]
    moved = {key for key in jobs if owner[key] != holders[key]}
    assert len(moved) == 1 and owner[moved.pop()] == "d"


def test_a_dead_nodes_jobs_spread_over_the_survivors() -> None:
    jobs = {f"job:{i}": "default" for i in range(6)}
    nodes = {"b": Q, "c": Q}
    holders = {"job:0": "a", "job:1": "a", "job:2": "b", "job:3": "b", "job:4": "c", "job:5": "c"}
    owner = plan(jobs, nodes, holders)
    assert _loads(owner, nodes) == {"b": 3, "c": 3}
    assert {owner["job:0"], owner["job:1"]} == {"b", "c"}


def test_a_job_goes_only_to_nodes_consuming_its_queue() -> None:
    jobs = {"job:x": "special", "job:y": "default"}
    nodes = {"a": Q, "b": frozenset({"special", "default"})}
    owner = plan(jobs, nodes, {"job:x": "a"})
    assert owner["job:x"] == "b"
    assert "job:z" not in plan({"job:z": "nowhere"}, nodes, {})


def test_constrained_jobs_are_placed_first() -> None:
    jobs = {"job:any1": "default", "job:any2": "default", "job:only-b": "special"}
    nodes = {"a": Q, "b": frozenset({"default", "special"})}
    owner = plan(jobs, nodes, {})
    assert owner["job:only-b"] == "b"
    assert _loads(owner, nodes) == {"a": 2, "b": 1} or _loads(owner, nodes) == {"a": 1, "b": 2}


@given(
    n_jobs=st.integers(min_value=0, max_value=30),
    n_nodes=st.integers(min_value=1, max_value=8),
    seed=st.lists(st.integers(min_value=0, max_value=9), max_size=30),
)
def test_same_queues_end_between_floor_and_ceil_from_any_start(
    n_jobs: int, n_nodes: int, seed: list[int]
) -> None:
    jobs = {f"job:{i}": "default" for i in range(n_jobs)}
    nodes = {f"n{i}": Q for i in range(n_nodes)}
    # Arbitrary current holders, some of them dead nodes (n8, n9 are never live here).
    holders = {f"job:{i}": f"n{s}" for i, s in enumerate(seed[:n_jobs])}
    owner = plan(jobs, nodes, holders)
    assert set(owner) == set(jobs)
    loads = _loads(owner, nodes).values()
    assert max(loads, default=0) <= math.ceil(n_jobs / n_nodes)
    assert min(loads, default=0) >= n_jobs // n_nodes
    # Deterministic: every node computes the same plan from the same snapshot.
    assert plan(jobs, dict(reversed(nodes.items())), holders) == owner
