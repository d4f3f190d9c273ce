"""The nemesis' fault schedule, drawn from a seed: the same seed gives the same faults at the same
offsets, so a failure replays (``NEMESIS_SEED=... make nemesis``).

A schedule is a list of ``Planned`` faults, each at an offset from the start of the faulty
period and with a duration (0 for an instant fault, such as a flush). A group of faults drawn
together (``several``) starts at the same offset.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

# What the nemesis does, and how often it picks each.
KINDS: dict[str, int] = {
    # SIGKILL of a beat, a worker's whole process tree, its main process alone (its pool
    # children orphaned) or one pool child
    "kill": 3,
    "pause": 3,  # SIGSTOP ... SIGCONT of the same
    "terminate-db": 2,  # pg_terminate_backend of every connection of the cluster
    "flush-broker": 2,  # FLUSHDB of the broker's database
    "restart-broker": 1,  # the broker's Redis killed, started again (empty) later
    "hang-db": 2,  # the proxied worker's database connections stop forwarding, not closed
    "several": 2,  # two or three of the above at once
}
# How long a fault with a duration lasts, in seconds (low, high).
DURATIONS = {"kill": (1.0, 8.0), "pause": (2.0, 12.0), "restart-broker": (1.0, 5.0),
             "hang-db": (3.0, 15.0)}  # fmt: skip
GAP = (3.0, 12.0)  # seconds between one draw and the next


@dataclass(frozen=True)
class Planned:
    at: float  # seconds after the faulty period began
    kind: str
    # a process role (beat-1, worker-2), a worker's main process alone (worker-1/main) or one
    # of its pool children (worker-1/child), "database", "broker"
    target: str
    seconds: float
    pick: int = 0  # which pool child, for a child target (an index into the sorted pids)

    def __str__(self) -> str:
        return f"+{self.at:.1f}s {self.kind}({self.target}) for {self.seconds:.1f}s"


def draw(seed: int, seconds: float, beats: Sequence[str], workers: Sequence[str],
         proxied: str) -> list[Planned]:  # fmt: skip
    """The faults of a ``seconds``-long faulty period; ``proxied`` is the worker whose database
    connections go through the hanging proxy."""
    rng = random.Random(seed)
    planned: list[Planned] = []
    at = rng.uniform(*GAP)
    while at < seconds:
        kind = _kind(rng)
        if kind == "several":
            kinds = [_kind(rng, exclude="several") for _ in range(rng.randint(2, 3))]
        else:
            kinds = [kind]
        for each in kinds:
            planned.append(_one(rng, at, each, beats, workers, proxied))
        at += rng.uniform(*GAP)
    return planned


def _kind(rng: random.Random, exclude: str = "") -> str:
    kinds = [k for k in KINDS if k != exclude]
    return rng.choices(kinds, weights=[KINDS[k] for k in kinds])[0]


def _one(rng: random.Random, at: float, kind: str, beats: Sequence[str],
         workers: Sequence[str], proxied: str) -> Planned:  # fmt: skip
    low, high = DURATIONS.get(kind, (0.0, 0.0))
    seconds = round(rng.uniform(low, high), 1)
    if kind in ("kill", "pause"):
        parts = [f"{w}/{part}" for w in workers for part in ("main", "child")]
        target = rng.choice([*beats, *workers, *parts])
        if kind == "kill" and target.endswith("/child"):
            seconds = 0.0  # the pool starts another child at once
        return Planned(at, kind, target, seconds, pick=rng.randrange(16))
    if kind in ("flush-broker", "restart-broker"):
        return Planned(at, kind, "broker", seconds)
    if kind == "hang-db":
        return Planned(at, kind, proxied, seconds)
    return Planned(at, kind, "database", seconds)
