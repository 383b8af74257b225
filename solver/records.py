"""What the controller remembers from one batch window to the next, in one place.

Each tenant's past held GPUs and fair share (:mod:`solver.fairshare`) and FGD's learned target
workload (:mod:`solver.workload`). The controller's cycle and the timed replay both call
:meth:`Records.apply` on every window's snapshot, so the replay measures exactly what
``berth serve`` does (docs/fair-sharing.md).

:meth:`Records.dumps` and :meth:`Records.loads` give the records a saved form (JSON), so that a
new leader carries on where the last one stopped (admission/controller/records.py keeps it in
a ConfigMap). Reading it back checks every field and bound: a form that is not one is refused
with the field named, and the reader starts fresh records instead.
"""

from __future__ import annotations

import json

from solver.fairshare import UsageHistory, observe_snapshot, state_fields, with_history
from solver.types import Snapshot
from solver.workload import MAX_SHAPES, WorkloadRecord, with_workload

#: The saved form's version (:meth:`Records.dumps`); another is refused, never guessed at.
STATE_VERSION = 1
#: The most a saved form may take (a ConfigMap holds 1 MiB with its metadata).
MAX_STATE_BYTES = 900_000


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

    def dumps(self) -> str:
        """The records as JSON, at most :data:`MAX_STATE_BYTES` (the least counted shapes of
        the target workload are left out until it fits)."""
        shapes = MAX_SHAPES
        while True:
            text = json.dumps({
                "version": STATE_VERSION,
                "usage": None if self.usage is None else self.usage.state(),
                "workload": None if self.workload is None else self.workload.state(shapes),
            }, separators=(",", ":"), allow_nan=False)
            if len(text) <= MAX_STATE_BYTES or shapes == 0:
                return text
            shapes //= 2

    @classmethod
    def loads(cls, text: str) -> Records:
        """Records from :meth:`dumps`'s form; ValueError naming the field when it is not one."""
        if len(text) > MAX_STATE_BYTES:
            raise ValueError(f"records: {len(text)} bytes, more than {MAX_STATE_BYTES}")
        try:
            data = json.loads(text, parse_constant=_no_constant)
        except (json.JSONDecodeError, RecursionError) as exc:
            raise ValueError(f"records: not JSON ({exc})") from None
        d = state_fields(data, "records", ("version", "usage", "workload"))
        if d["version"] != STATE_VERSION:
            raise ValueError(f"records.version: this Berth reads version {STATE_VERSION}, "
                             f"got {d['version']!r:.40}")
        rec = cls()
        if d["usage"] is not None:
            rec.usage = UsageHistory.from_state(d["usage"], "records.usage")
        if d["workload"] is not None:
            rec.workload = WorkloadRecord.from_state(d["workload"], "records.workload")
        return rec


def _no_constant(name: str) -> object:
    raise ValueError(f"records: {name} is not a number JSON allows")
