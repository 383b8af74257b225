"""What the controller remembers from one batch window to the next, in one place.

Each tenant's past held GPUs and fair share (:mod:`solver.fairshare`) and FGD's learned target
workload (:mod:`solver.workload`). The controller's cycle and the timed replay both call
:meth:`Records.apply` on every window's snapshot, so the replay measures exactly what
``berth serve`` does (docs/fair-sharing.md).
"""

from __future__ import annotations

from solver.fairshare import UsageHistory, observe_snapshot, with_history
from solver.types import Snapshot
from solver.workload import WorkloadRecord, with_workload


class Records:
    """The records, started, restarted and dropped as the snapshot's policy says."""

    def __init__(self) -> None:
        self.usage: UsageHistory | None = None
        self.workload: WorkloadRecord | None = None

    def apply(self, snapshot: Snapshot, now_s: float, *, observe: bool = True) -> Snapshot:
        """Record ``snapshot`` (when ``observe``: a window that holds every pending gang) and
        return it with each tenant's past and the learned target workload. What the policy
        turns off is dropped; a new half-life starts that record over."""
        fs, target = snapshot.policy.fair_sharing, snapshot.policy.target_workload
        seen = snapshot
        if not fs.enabled:
            self.usage = None
        else:
            if self.usage is None or self.usage.half_life_s != fs.half_life_s:
                self.usage = UsageHistory(fs.half_life_s)
            if observe:
                observe_snapshot(self.usage, now_s, snapshot)
            seen = with_history(seen, self.usage)
        if target.half_life_s <= 0:
            self.workload = None
        else:
            if self.workload is None or self.workload.half_life_s != target.half_life_s:
                self.workload = WorkloadRecord(target.half_life_s)
            if observe:
                self.workload.observe(now_s, seen)
            seen = with_workload(seen, self.workload)
        return seen
