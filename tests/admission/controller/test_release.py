"""Release protocol: idempotent, and a crash at any point leaves no gang half released; a
restarted controller finishes from the API server alone."""

from __future__ import annotations

import contextlib
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from admission import constants as c
from admission.controller import translate as tr
from admission.controller.snapshot import build
from solver.plan import GangPlacement, PodPlacement
from solver.types import GpuShare
from tests.admission.controller.fakeapi import Crash, FakeApi
from tests.admission.controller.harness import controller, gang_cluster, gates, pinned_node
from tests.admission.controller.harness import settings as controller_settings
from tests.admission.controller.objects import FakeClock, node, pod

GANG = 3


def setup() -> FakeApi:
    api = FakeApi()
    for i in range(2):
        api.add_node(node(f"n{i}", gpus=8))
    for i in range(GANG):
        api.add_pod(pod(f"w{i}", gang="g", size=GANG, gpus=4))
    api.add_pod(pod("solo", gang="solo", size=1, gpus=2))
    return api


def released_keys(api: FakeApi) -> set[str]:
    return {k for k in api.pods if c.SCHEDULING_GATE not in gates(api, k)}


def assert_no_half_gang(api: FakeApi) -> None:
    """Either no pod of the gang is past the gate, or every pod carries the same plan."""
    gang = [k for k in api.pods if "/w" in k]
    out = [k for k in gang if k in released_keys(api)]
    if out:
        plans = {api.pods[k]["metadata"]["annotations"].get(c.ANNOTATION_PLAN) for k in gang}
        assert len(plans) == 1 and None not in plans, f"half released: {out}, plans {plans}"


def assert_consistent_final_state(api: FakeApi) -> None:
    assert released_keys(api) == set(api.pods), "every pod should be released in the end"
    taken: Counter[tuple[str, int]] = Counter()
    for key, p in api.pods.items():
        node_name, shares = tr.assigned_shares(p)  # type: ignore[misc]
        assert pinned_node(api, key) == node_name
        for s in shares:
            taken[(node_name, s.index)] += s.milli
    assert max(taken.values()) <= 1000, f"a GPU was given twice: {taken}"
    plans = {api.pods[k]["metadata"]["annotations"][c.ANNOTATION_PLAN] for k in api.pods
             if "/w" in k}
    assert len(plans) == 1


def count_patches_of_full_release() -> int:
    api = setup()
    controller(api, FakeClock()).run_cycle()
    return len(api.patches)


@pytest.mark.parametrize("crash_at", range(count_patches_of_full_release()))
def test_crash_at_any_write_leaves_no_gang_half_released(crash_at: int) -> None:
    api = setup()
    clock = FakeClock()
    api.fail_after = crash_at
    with pytest.raises(Crash):
        controller(api, clock).run_cycle()
    assert_no_half_gang(api)
    # A new replica, knowing only what the API server holds, completes the job.
    clock.advance(10)
    controller(api, clock, identity="replica-1").run_cycle()
    assert_consistent_final_state(api)


def test_gang_interrupted_after_placement_is_finished_without_solving() -> None:
    def no_solving(snapshot):  # a finishing gang must never reach the solver again
        assert all(g.name != "team-a/g" for g in snapshot.gangs), "gang solved twice"
        from solver.api import solve
        return solve(snapshot, solver="bestfit")

    finishing_seen = 0
    for crash_at in range(count_patches_of_full_release()):
        api = setup()
        clock = FakeClock()
        api.fail_after = crash_at
        with pytest.raises(Crash):
            controller(api, clock).run_cycle()
        ctl = controller(api, clock, solve_fn=no_solving)
        info = build(ctl.inventory.view(), ctl.settings, clock()).gangs.get("team-a/g")
        if info is None or info.state != "finishing":
            continue
        finishing_seen += 1
        report = ctl.run_cycle()
        assert [(r.gang, r.complete) for r in report.finished] == [("team-a/g", True)]
        assert_consistent_final_state(api)
    assert finishing_seen >= GANG  # a crash before each of the gang's gates


def test_finishing_gang_holds_its_capacity() -> None:
    api = setup()
    clock = FakeClock()
    controller(api, clock).run_cycle()
    # Put the gate back in the store (as if crashed before the gate phase) on one pod.
    key = "team-a/w0"
    api.pods[key]["spec"]["schedulingGates"] = [{"name": c.SCHEDULING_GATE}]
    del api.pods[key]["spec"]["affinity"]
    ctl = controller(api, clock)
    built = build(ctl.inventory.view(), ctl.settings, clock())
    assert built.gangs["team-a/g"].state == "finishing"
    assert key in {r.name for r in built.snapshot.running}


def test_release_twice_changes_nothing_the_second_time() -> None:
    api = setup()
    ctl = controller(api, FakeClock(), s=controller_settings())
    built = build(ctl.inventory.view(), ctl.settings, FakeClock()())
    info = built.gangs["team-a/g"]
    gp = GangPlacement("team-a/g", tuple(
        PodPlacement(f"team-a/w{i}", "n0" if i < 2 else "n1",
                     tuple(GpuShare(j, 1000) for j in range(4 * (i % 2), 4 * (i % 2) + 4)))
        for i in range(GANG)))
    first = ctl.releaser.release(info, gp, "plan-1")
    assert first.complete and (first.wrote, first.opened) == (GANG, GANG)
    n = len(api.patches)
    # The same release again, from the objects as they now are.
    again = build(ctl.inventory.view(), ctl.settings, FakeClock()())
    assert "team-a/g" not in again.gangs  # no gated pod left: nothing to decide
    info.gated = [api.pods[f"team-a/w{i}"] for i in range(GANG)]
    second = ctl.releaser.release(info, gp, "plan-1")
    assert second.complete and (second.wrote, second.opened) == (0, 0)
    assert len(api.patches) == n


def test_stale_partial_placement_is_overwritten_by_the_next_plan() -> None:
    api = setup()
    clock = FakeClock()
    api.fail_after = 1  # one placement written, then the crash
    with pytest.raises(Crash):
        controller(api, clock).run_cycle()
    partial = [k for k in api.pods if api.pods[k]["metadata"]["annotations"].get(
        c.ANNOTATION_PLAN)]
    assert len(partial) == 1 and all(c.SCHEDULING_GATE in gates(api, k) for k in api.pods)
    ctl = controller(api, clock)
    assert build(ctl.inventory.view(), ctl.settings, clock()).gangs[
        tr.gang_name(api.pods[partial[0]])].state == "pending"
    ctl.run_cycle()
    assert_consistent_final_state(api)


@settings(max_examples=20, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 4), st.sampled_from([1, 2, 4, 8])), min_size=1,
                max_size=5),
       st.integers(0, 40), st.integers(1, 3))
def test_random_gangs_crash_anywhere_never_half_released(gangs, crash_at, nodes) -> None:
    api = gang_cluster(gangs, nodes)
    clock = FakeClock()
    api.fail_after = crash_at
    with contextlib.suppress(Crash):
        controller(api, clock, solve_fn=bestfit).run_cycle()
    api.fail_after = None
    for g, (size, _) in enumerate(gangs):
        keys = [f"team-a/g{g}-{k}" for k in range(size)]
        out = [k for k in keys if c.SCHEDULING_GATE not in gates(api, k)]
        if out:
            plans = {api.pods[k]["metadata"]["annotations"].get(c.ANNOTATION_PLAN) for k in keys}
            assert len(plans) == 1 and None not in plans, f"gang g{g} half released"
    # A fresh replica completes what was started and never gives a GPU twice.
    controller(api, clock, solve_fn=bestfit, identity="replica-1").run_cycle()
    taken: Counter[tuple[str, int]] = Counter()
    for g, (size, _) in enumerate(gangs):
        keys = [f"team-a/g{g}-{k}" for k in range(size)]
        released = [k for k in keys if c.SCHEDULING_GATE not in gates(api, k)]
        assert len(released) in (0, size), f"gang g{g}: {len(released)} of {size} released"
        for k in released:
            node_name, shares = tr.assigned_shares(api.pods[k])  # type: ignore[misc]
            assert pinned_node(api, k) == node_name
            for s in shares:
                taken[(node_name, s.index)] += s.milli
    assert not taken or max(taken.values()) <= 1000


def bestfit(snapshot):
    from solver.api import solve
    return solve(snapshot, solver="bestfit")
