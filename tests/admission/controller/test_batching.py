"""When a batch runs (admission/controller/batching.py): which pod events may bring it forward,
and the settle's arithmetic: after the last such event (or the first, while the scheduler waits
on a creation burst), never sooner after a batch than the settle or than that batch took, never
later than the window."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from admission.controller import pacing
from admission.controller.batching import BatchTiming, settles_batch
from solver.simulate import timed
from tests.admission.controller.objects import pod


def test_an_arrival_settles_a_batch_while_nothing_waits() -> None:
    assert settles_batch("ADDED", pod("p"), waiting=False)
    # while gangs wait, a newcomer would take the holes they need: the window decides
    assert not settles_batch("ADDED", pod("p"), waiting=True)


def test_freed_capacity_settles_a_batch_while_gangs_wait() -> None:
    running = pod("r", gated=False, node_name="n0")
    done = pod("d", gated=False, node_name="n0")
    done["status"]["phase"] = "Succeeded"
    failed = pod("f", gated=False, node_name="n0")
    failed["status"]["phase"] = "Failed"
    # the API server marks a pod it deletes first (the inventory drops it then): the only
    # event that changes the inventory, the DELETED after it changing nothing
    terminating = pod("t", gated=False, node_name="n0")
    terminating["metadata"]["deletionTimestamp"] = "2026-11-29T14:00:05Z"
    for event, p in (("DELETED", running), ("MODIFIED", done), ("MODIFIED", failed),
                     ("MODIFIED", terminating)):
        assert settles_batch(event, p, waiting=True)
        # nothing waits for what it freed
        assert not settles_batch(event, p, waiting=False)


@pytest.mark.parametrize("waiting", [False, True])
def test_other_events_do_not(waiting: bool) -> None:
    # a pod Berth does not hold, a gated pod changing or deleted (nothing freed), a pod that
    # keeps running or is bound
    assert not settles_batch("ADDED", pod("u", gated=False), waiting=waiting)
    assert not settles_batch("MODIFIED", pod("p"), waiting=waiting)
    assert not settles_batch("DELETED", pod("p"), waiting=waiting)
    assert not settles_batch("MODIFIED", pod("r", gated=False, node_name="n0"),
                             waiting=waiting)
    assert not settles_batch("ADDED", pod("r", gated=False, node_name="n0"), waiting=waiting)


def test_no_settle_or_nothing_new_is_the_window() -> None:
    t = BatchTiming()
    assert t.due(10.0, None, 1.0) == 10.0
    assert t.due(10.0, 3.0, 0.0) == 10.0


def test_the_settle_after_the_last_event_and_never_past_the_window() -> None:
    t = BatchTiming()
    assert t.due(10.0, 3.0, 1.0) == 4.0
    assert t.due(10.0, 9.5, 1.0) == 10.0
    # a settle longer than the window changes nothing
    assert t.due(10.0, 3.0, 60.0) == 10.0


def test_after_a_batch_the_next_waits_the_settle_and_as_long_as_it_took() -> None:
    t = BatchTiming()
    t.ran(4.0, 4.2)  # took 0.2 s: the settle (1 s) bounds
    assert t.due(14.0, 4.1, 1.0) == pytest.approx(5.2)
    t.ran(4.0, 7.0)  # took 3 s: at most half the time in batches
    assert t.due(14.0, 7.1, 1.0) == pytest.approx(10.0)
    assert t.due(9.0, 7.1, 1.0) == 9.0


def test_while_the_scheduler_waits_on_a_burst_the_settle_counts_from_its_first_arrival() -> None:
    t = BatchTiming()
    # arrivals from 3.0 to 9.5 keep pushing the settle back to the window...
    assert t.due(10.0, 9.5, 1.0) == 10.0
    # ...unless the scheduler has nothing to bind meanwhile: 1 s after the first
    assert t.due(10.0, 9.5, 1.0, hurry_from=3.0) == 4.0
    # the last arrival's settle when that is sooner; never sooner than the spacing
    assert t.due(10.0, 3.2, 1.0, hurry_from=3.0) == 4.0
    t.ran(3.5, 6.5)
    assert t.due(20.0, 9.5, 1.0, hurry_from=6.6) == pytest.approx(9.5)
    # no settle: the window, whatever the burst
    assert t.due(10.0, 9.5, 0.0, hurry_from=3.0) == 10.0


def test_the_simulator_tells_a_burst_as_the_controller_does() -> None:
    assert timed.BURST_PODS == pacing.BURST_PODS
    assert timed.BURST_WINDOW_S == pacing.BURST_WINDOW_S


@given(next_batch=st.floats(0, 1e4), settle_from=st.none() | st.floats(0, 1e4),
       hurry_from=st.none() | st.floats(0, 1e4),
       settle=st.sampled_from([0.0, 0.1, 1.0, 30.0]),
       start=st.floats(0, 1e4), took=st.floats(0, 100))
def test_due_is_never_past_the_window_nor_before_the_spacing(
        next_batch: float, settle_from: float | None, hurry_from: float | None, settle: float,
        start: float, took: float) -> None:
    t = BatchTiming()
    t.ran(start, start + took)
    due = t.due(next_batch, settle_from, settle, hurry_from=hurry_from)
    assert due <= next_batch
    if due < next_batch:
        assert settle_from is not None and settle > 0
        assert due >= min(settle_from, math.inf if hurry_from is None else hurry_from) + settle
        assert due >= start + took + max(settle, took) - 1e-9
    if hurry_from is None or settle_from is None or hurry_from >= settle_from:
        assert due == t.due(next_batch, settle_from, settle)  # nothing earlier to hurry to
    assert not math.isnan(due)
