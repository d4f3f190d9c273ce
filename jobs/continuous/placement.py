"""Where each continuous job should run: a pure function of one snapshot of the cluster.

Every node's supervisor computes the same plan from (nearly) the same snapshot, so the nodes agree
on who should hold what without a coordinator: a node starts the free jobs planned for it and
hands over (gracefully) the jobs planned elsewhere. The lease, not the plan, keeps a job on at
most one node; a plan computed from a stale snapshot can only delay a move, never double a job.

The plan is sticky and balanced. Jobs stay with their current live holder; free jobs go to the
least loaded eligible node; then, while some job could move from a node to an eligible node
holding at least 2 fewer, the most loaded node gives one up. With every node consuming the same
queues that ends with each node holding ``floor(N/K)`` or ``ceil(N/K)`` of the N jobs; with
different queues it ends where no single move improves the balance.
"""

from __future__ import annotations

from collections.abc import Mapping


def plan(
    jobs: Mapping[str, str],
    nodes: Mapping[str, frozenset[str]],
    holders: Mapping[str, str],
) -> dict[str, str]:
    """Desired node of each job some live node can run.

    ``jobs`` maps a job's lease key to its queue, ``nodes`` each live node to the queues it
    consumes, ``holders`` a job's key to the node holding its live lease (holders that are not
    live nodes, or cannot run the job, are ignored).
    """
    eligible = {
        key: sorted(node for node, queues in nodes.items() if queue in queues)
        for key, queue in jobs.items()
    }
    load = dict.fromkeys(nodes, 0)
    owner: dict[str, str] = {}
    for key in sorted(jobs):
        holder = holders.get(key)
        if holder is not None and holder in eligible[key]:
            owner[key] = holder
            load[holder] += 1

    def most_constrained_first(key: str) -> tuple[int, str]:
        # So that a job only one node can run is not crowded out by jobs that could go anywhere.
        return (len(eligible[key]), key)

    free = sorted(
        (key for key in jobs if key not in owner and eligible[key]), key=most_constrained_first
    )
    for key in free:
        node = min(eligible[key], key=lambda n: (load[n], n))
        owner[key] = node
        load[node] += 1

    while _move_one(owner, load, eligible):
        pass
    return owner


def _move_one(
    owner: dict[str, str], load: dict[str, int], eligible: Mapping[str, list[str]]
) -> bool:
    """Move one job off the most loaded node that can give one to a node holding ≥ 2 fewer.

    Each move lowers the sum of squared loads, so repeating it ends.
    """
    for giver in sorted(load, key=lambda n: (-load[n], n)):
        for key in sorted((k for k, n in owner.items() if n == giver), reverse=True):
            takers = [n for n in eligible[key] if load[n] <= load[giver] - 2]
            if takers:
                taker = min(takers, key=lambda n: (load[n], n))
                owner[key] = taker
                load[giver] -= 1
                load[taker] += 1
                return True
    return False
