"""The release protocol with concurrent writes (gangs side by side, each gang's pods at once):
whatever the interleaving and wherever a crash lands, no gang is half released, a fresh replica
completes every gang from the API server alone, and no GPU is given twice. The interleaving is
the threads', so each case runs several times."""

from __future__ import annotations

import contextlib
import threading
import time
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from admission import constants as c
from admission.controller import translate as tr
from admission.controller.writers import Abandoned, Writers
from tests.admission.controller.fakeapi import Crash, FakeApi
from tests.admission.controller.harness import controller, gang_cluster, gates, pinned_node
from tests.admission.controller.harness import settings as controller_settings
from tests.admission.controller.objects import FakeClock

WRITERS = 8


def gang_keys(gangs: list[tuple[int, int]]) -> list[list[str]]:
    return [[f"team-a/g{g}-{k}" for k in range(size)] for g, (size, _) in enumerate(gangs)]


def assert_no_half_gang(api: FakeApi, gangs: list[tuple[int, int]]) -> None:
    for keys in gang_keys(gangs):
        out = [k for k in keys if c.SCHEDULING_GATE not in gates(api, k)]
        if out:
            plans = {api.pods[k]["metadata"]["annotations"].get(c.ANNOTATION_PLAN) for k in keys}
            assert len(plans) == 1 and None not in plans, f"half released: {out}, plans {plans}"


def assert_all_released_once(api: FakeApi, gangs: list[tuple[int, int]]) -> None:
    taken: Counter[tuple[str, int]] = Counter()
    for keys in gang_keys(gangs):
        released = [k for k in keys if c.SCHEDULING_GATE not in gates(api, k)]
        assert len(released) in (0, len(keys)), f"{len(released)} of {len(keys)} released"
        for k in released:
            node_name, shares = tr.assigned_shares(api.pods[k])  # type: ignore[misc]
            assert pinned_node(api, k) == node_name
            for s in shares:
                taken[(node_name, s.index)] += s.milli
    assert not taken or max(taken.values()) <= 1000, f"a GPU was given twice: {taken}"


def concurrent(api: FakeApi, clock: FakeClock, identity: str = "replica-0"):
    return controller(api, clock, s=controller_settings(release_writers=WRITERS),
                      solve_fn=bestfit, identity=identity)


def bestfit(snapshot):
    from solver.api import solve
    return solve(snapshot, solver="bestfit")


SHAPE = [(3, 4), (1, 2), (2, 2), (1, 1), (4, 1)]  # 11 pods, 22 GPUs on 3 nodes


def test_concurrent_release_writes_every_pod_and_opens_every_gate() -> None:
    api = gang_cluster(SHAPE, nodes=3)
    report = concurrent(api, FakeClock()).run_cycle()
    assert all(r.complete for r in report.released) and len(report.released) == len(SHAPE)
    assert sum(r.wrote for r in report.released) == sum(n for n, _ in SHAPE)
    assert all(c.SCHEDULING_GATE not in gates(api, k) for k in api.pods)
    assert_all_released_once(api, SHAPE)
    # Every pod got its placement before any gate of its gang opened (in the order the API
    # server applied the patches); a gang of one pod gets both in one patch.
    first_gate: dict[str, int] = {}
    last_placement: dict[str, int] = {}
    for i, (key, ops) in enumerate(api.patches):
        gang = key.rsplit("-", 1)[0]
        gate = any(op["path"].startswith("/spec/schedulingGates") for op in ops)
        if any(op["path"].startswith("/metadata/annotations") for op in ops):
            last_placement[gang] = i
        if gate:
            first_gate.setdefault(gang, i)
    assert set(first_gate) == set(last_placement) == {f"team-a/g{g}" for g in range(len(SHAPE))}
    for g, (size, _) in enumerate(SHAPE):
        gang = f"team-a/g{g}"
        if size == 1:
            assert first_gate[gang] == last_placement[gang]  # one patch: placement and gate
        else:
            assert last_placement[gang] < first_gate[gang]


def patches_of_full_release() -> int:
    api = gang_cluster(SHAPE, nodes=3)
    concurrent(api, FakeClock()).run_cycle()
    return len(api.patches)


@pytest.mark.parametrize("repeat", range(3))
@pytest.mark.parametrize("crash_at", range(patches_of_full_release()))
def test_crash_at_any_concurrent_write_leaves_no_gang_half_released(crash_at: int,
                                                                    repeat: int) -> None:
    api = gang_cluster(SHAPE, nodes=3)
    clock = FakeClock()
    api.fail_after = crash_at
    with pytest.raises(Crash):
        concurrent(api, clock).run_cycle()
    assert_no_half_gang(api, SHAPE)
    clock.advance(10)
    concurrent(api, clock, identity="replica-1").run_cycle()
    assert all(c.SCHEDULING_GATE not in gates(api, k) for k in api.pods)
    assert_all_released_once(api, SHAPE)


@settings(max_examples=25, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 4), st.sampled_from([1, 2, 4, 8])), min_size=1,
                max_size=6),
       st.integers(0, 50), st.integers(1, 3))
def test_random_gangs_concurrent_crash_anywhere_never_half_released(gangs, crash_at,
                                                                    nodes) -> None:
    api = gang_cluster(gangs, nodes)
    clock = FakeClock()
    api.fail_after = crash_at
    with contextlib.suppress(Crash):
        concurrent(api, clock).run_cycle()
    api.fail_after = None
    assert_no_half_gang(api, gangs)
    concurrent(api, clock, identity="replica-1").run_cycle()
    assert_all_released_once(api, gangs)


def test_writers_overlap_calls_and_stop_starting_after_a_failure() -> None:
    pool = Writers(4, "test")
    in_flight, most = 0, 0
    lock = threading.Lock()

    def slow(i: int) -> int:
        nonlocal in_flight, most
        with lock:
            in_flight += 1
            most = max(most, in_flight)
        time.sleep(0.02)
        with lock:
            in_flight -= 1
        return i * i

    assert pool.each(slow, list(range(12)), threading.Event()) == [i * i for i in range(12)]
    assert most == 4  # bounded, and overlapping

    started: list[int] = []

    def fails_at_two(i: int) -> int:
        started.append(i)
        if i == 2:
            raise Crash("dies here")
        time.sleep(0.05)
        return i

    stop = threading.Event()
    with pytest.raises(Crash):
        pool.each(fails_at_two, list(range(40)), stop)
    assert stop.is_set() and len(started) < 40  # nothing new starts after the crash
    with pytest.raises(Abandoned):
        pool.each(slow, [1, 2], stop)  # the same batch: nothing more starts at all
    pool.close()


def test_one_writer_keeps_plan_order() -> None:
    api = gang_cluster(SHAPE, nodes=3)
    controller(api, FakeClock(), solve_fn=bestfit).run_cycle()  # release_writers=1
    gangs_in_order = [key.rsplit("-", 1)[0] for key, _ in api.patches]
    # one gang at a time: its placements then its gates, never interleaved with another gang
    runs = [g for i, g in enumerate(gangs_in_order) if i == 0 or gangs_in_order[i - 1] != g]
    assert len(runs) == len(set(runs))
