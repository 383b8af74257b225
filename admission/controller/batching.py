"""When a batch runs: at the end of each window, or sooner once arrivals settle.

A batch decides every pending gang together, so it waits for the window (``batch.windowSeconds``)
to gather arrivals. Two events make waiting pointless, each in its own state of the queue:

- a gated pod is created while nothing waits (the last batch placed every complete gang): on a
  quiet cluster there is nothing to decide it together with but what else arrives with it;
- a pod on a node finishes or is deleted while gangs wait: the capacity it freed is theirs to
  take, and every second until the window ends it would idle.

When one of them happens and then none for ``batch.settleSeconds``, the batch runs. A burst
closer together than the settle keeps pushing it back, so a burst is still decided as one; at
the latest the window's batch runs as before. One exception: during a creation burst (pods
created quickly, :class:`admission.controller.pacing.Arrivals`) while the scheduler behind Berth
is short of released pods to bind (pacing.py's ``scheduler_short``), the settle counts from the
burst's first arrival since the last batch, not its last: the scheduler would idle until the
burst ends or the window does (up to ``windowSeconds`` plus the solve of everything that
arrived meanwhile), so the batch decides what has come by then and the rest follows in the
next (measured: e2e/bench_pace.md). While gangs wait, new arrivals bring nothing
forward: a batch they set off would let small newcomers take the holes the waiting gangs need
(measured: bench/timed_sim.md). After a batch the next early one waits at least the settle and
at least as long as that batch took, so the controller spends at most half its time in batches
however pods come and go (a tenant that creates and deletes pods in a loop gets no more batches
than that). The timed replay wakes the same way (:meth:`solver.simulate.timed._Replay.wake_up`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from admission.controller import translate as tr
from admission.controller.api import Json


def settles_batch(event: str, pod: Json, *, waiting: bool) -> bool:
    """Whether a pod watch event (one that changed the inventory) may bring the next batch
    forward: a pod behind Berth's gate was created while nothing waits, or a pod on a node
    finished or began to be deleted while gangs wait (``waiting``: the last batch left gangs
    waiting)."""
    if event == "ADDED":
        return not waiting and tr.has_berth_gate(pod)
    on_node = bool((pod.get("spec") or {}).get("nodeName"))
    # as the inventory counts it: a pod being deleted holds nothing from then on
    leaving = event == "DELETED" or tr.is_finished(pod) \
        or bool((pod.get("metadata") or {}).get("deletionTimestamp"))
    return waiting and on_node and leaving


@dataclass(slots=True)
class BatchTiming:
    """The last batch's start and end (monotonic seconds), and when the next one is due."""

    last_start: float = -math.inf
    last_end: float = -math.inf

    def due(self, next_batch: float, settle_from: float | None, settle: float, *,
            hurry_from: float | None = None) -> float:
        """The next batch's time: the window's (``next_batch``), or ``settle`` after the
        last arrival or freed capacity (``settle_from``; None: none since the last batch)
        when that is sooner, or ``settle`` after ``hurry_from`` (the first arrival since the
        last batch, given only while the scheduler waits on a creation burst) when that is
        sooner still, but not sooner after the last batch ended than ``settle`` nor than that
        batch took. ``settle`` 0: the window's."""
        if settle <= 0 or settle_from is None:
            return next_batch
        took = self.last_end - self.last_start if math.isfinite(self.last_start) else 0.0
        quiet = settle_from + settle
        if hurry_from is not None:
            quiet = min(quiet, hurry_from + settle)
        early = max(quiet, self.last_end + max(settle, took))
        return min(next_batch, early)

    def ran(self, start: float, end: float) -> None:
        self.last_start, self.last_end = start, end
