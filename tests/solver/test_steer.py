"""Keeping GPU models free for the pods that may run only on them (solver/baselines/steer.py):
each model's need from the target workload, which nodes a pod is steered to, that a restricted
pod is never held back, and that the order search's FGD passes steer while FGD itself does not."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from solver.baselines import ClusterArrays, GangPlacer
from solver.baselines.steer import KEEP_FACTOR, ModelSteer
from solver.checker import check
from solver.cpsat.search import search
from solver.names import SolverName
from solver.types import (
    GPU,
    Gang,
    GpuShare,
    Node,
    PodRequest,
    Running,
    Snapshot,
    SolverPolicy,
    Tenant,
    TypicalPod,
)
from solver.workload import WorkloadRecord, with_workload
from tests.solver.test_cpsat_random import snapshots


def _node(name: str, model: str, gpus: int = 8) -> Node:
    return Node(name=name, cpu_milli=64000, memory_mib=262144,
                gpus=tuple(GPU(index=i, model=model) for i in range(gpus)))


ANY = TypicalPod(cpu_milli=1000, gpu_count=1, gpu_milli=1000, weight=0.75)
ONLY_B = TypicalPod(cpu_milli=1000, gpu_count=1, gpu_milli=1000, models=frozenset({"B"}),
                    weight=0.25)


def _snapshot(*, running_on_b: int = 0, gangs: tuple[Gang, ...] = (),
              workload: tuple[TypicalPod, ...] = (ANY, ONLY_B)) -> Snapshot:
    """Node a0 of model A, node b0 of model B, 8 GPUs each; ``running_on_b`` GPUs of b0 busy."""
    running = tuple(Running(f"r{i}", "b0", gpus=(GpuShare(i, 1000),))
                    for i in range(running_on_b))
    return Snapshot(nodes=(_node("a0", "A"), _node("b0", "B")), gangs=gangs, running=running,
                    policy=SolverPolicy(typical_pods=workload))


def _pod(name: str, models: frozenset[str] = frozenset()) -> PodRequest:
    return PodRequest(name=name, cpu_milli=1000, gpu_count=1, gpu_milli=1000, models=models)


# ------------------------------------------------------------------------------ the need


def test_need_is_the_restricted_share_of_gpu_demand() -> None:
    steer = ModelSteer.of(ClusterArrays(_snapshot()))
    assert steer is not None
    a, b = (ClusterArrays(_snapshot()).models.index(m) for m in ("A", "B"))
    assert steer.need[b] == pytest.approx(0.25) and steer.need[a] == 0.0
    assert steer.need[-1] == 0.0  # nodes without a GPU


def test_need_of_a_pod_allowed_several_models_is_shared_by_capacity() -> None:
    nodes = (_node("a0", "A"), _node("b0", "B"), _node("b1", "B"), _node("c0", "C"))
    two = TypicalPod(gpu_count=2, gpu_milli=500, models=frozenset({"A", "B"}), weight=1.0)
    anyw = TypicalPod(gpu_count=1, gpu_milli=1000, weight=1.0)
    cpu = TypicalPod(cpu_milli=4000, weight=5.0)  # a CPU-only pod asks no GPU
    state = ClusterArrays(Snapshot(nodes=nodes, policy=SolverPolicy(typical_pods=(two, anyw,
                                                                                  cpu))))
    steer = ModelSteer.of(state)
    assert steer is not None
    need = dict(zip(state.models, steer.need, strict=False))
    # half of the GPU demand may use A or B only, split 8 : 16 GPUs
    assert need["A"] == pytest.approx(0.5 / 3) and need["B"] == pytest.approx(1.0 / 3)
    assert need["C"] == 0.0


@pytest.mark.parametrize("workload", [
    (ANY,),  # nothing restricted
    (ANY, TypicalPod(gpu_count=1, gpu_milli=1000, models=frozenset({"A", "B", "Z"}))),  # all
    (ANY, TypicalPod(gpu_count=1, gpu_milli=1000, models=frozenset({"Z"}))),  # none present
    (),
])
def test_no_steer_when_no_model_is_needed(workload: tuple[TypicalPod, ...]) -> None:
    assert ModelSteer.of(ClusterArrays(_snapshot(workload=workload))) is None


def test_a_model_its_restricted_pods_alone_would_fill_is_not_kept() -> None:
    # half the demand may use B only, and B is half the GPUs: those pods fill it themselves
    half = TypicalPod(cpu_milli=1000, gpu_count=1, gpu_milli=1000, models=frozenset({"B"}),
                      weight=0.5)
    anyw = TypicalPod(cpu_milli=1000, gpu_count=1, gpu_milli=1000, weight=0.5)
    assert ModelSteer.of(ClusterArrays(_snapshot(workload=(anyw, half)))) is None
    # a third node of model C: B is a third of the GPUs, still less than its pods' half
    s = Snapshot(nodes=(_node("a0", "A"), _node("b0", "B"), _node("c0", "C")),
                 policy=SolverPolicy(typical_pods=(anyw, half)))
    assert ModelSteer.of(ClusterArrays(s)) is None
    # a quarter of the demand on a third of the GPUs is kept
    quarter = TypicalPod(cpu_milli=1000, gpu_count=1, gpu_milli=1000, models=frozenset({"B"}),
                         weight=0.25)
    three = TypicalPod(cpu_milli=1000, gpu_count=1, gpu_milli=1000, weight=0.75)
    s = Snapshot(nodes=s.nodes, policy=SolverPolicy(typical_pods=(three, quarter)))
    steer = ModelSteer.of(ClusterArrays(s))
    assert steer is not None and steer.need.max() == pytest.approx(0.25)


def test_no_steer_on_a_cluster_of_one_model() -> None:
    s = Snapshot(nodes=(_node("a0", "A"), _node("a1", "A")),
                 policy=SolverPolicy(typical_pods=(ANY, TypicalPod(
                     gpu_count=1, gpu_milli=1000, models=frozenset({"A"})))))
    assert ModelSteer.of(ClusterArrays(s)) is None


# ------------------------------------------------------------------------------ where pods go


def test_a_pod_of_any_model_leaves_a_kept_model_alone() -> None:
    # b0 has 1 GPU free of 9 free in all: B keeps room for its need (0.5 x 0.25 x 9 GPUs)
    state = ClusterArrays(_snapshot(running_on_b=7))
    steer = ModelSteer.of(state)
    assert steer is not None and KEEP_FACTOR * 0.25 * 9000 > 0
    fit = np.ones(2, dtype=np.bool_)
    a, b = state.row_of["a0"], state.row_of["b0"]
    prefer = steer.prefer(state, _pod("any"), fit)
    assert prefer[a] and not prefer[b]
    # the pod the room is kept for takes it
    assert steer.prefer(state, _pod("b-only", frozenset({"B"})), np.array([False, True])
                        if b == 1 else np.array([True, False])).any()
    # where no other model fits, a kept one is taken: a pod is never turned away by keeping
    only_b = np.zeros(2, dtype=np.bool_)
    only_b[b] = True
    assert (steer.prefer(state, _pod("any"), only_b) == only_b).all()
    # a CPU-only pod is not steered
    cpu = PodRequest(name="cpu", cpu_milli=1000)
    assert (steer.prefer(state, cpu, fit) == fit).all()


def test_an_empty_cluster_keeps_nothing_from_anyone() -> None:
    state = ClusterArrays(_snapshot())
    steer = ModelSteer.of(state)
    assert steer is not None
    fit = np.ones(2, dtype=np.bool_)
    assert steer.prefer(state, _pod("any"), fit).all()  # 8 of 16 free on B: room enough


# mostly whole GPUs of any model, a tenth that may use B only
WHOLE_ANY = TypicalPod(cpu_milli=1000, gpu_count=1, gpu_milli=1000, weight=0.9)
WHOLE_B = TypicalPod(cpu_milli=1000, gpu_count=1, gpu_milli=1000, models=frozenset({"B"}),
                     weight=0.1)


def _half(name: str, models: frozenset[str] = frozenset()) -> PodRequest:
    return PodRequest(name=name, cpu_milli=1000, gpu_count=1, gpu_milli=500, models=models)


def _half_b_left() -> Snapshot:
    """b0's GPUs busy but half of its last one; two pods of half a GPU, one of any model and
    then one that may use B only."""
    gangs = (Gang(name="g-any", tenant="t", pods=(_half("any"),)),
             Gang(name="g-b", tenant="t", pods=(_half("b-only", frozenset({"B"})),)))
    running = (*(Running(f"r{i}", "b0", gpus=(GpuShare(i, 1000),)) for i in range(7)),
               Running("r7", "b0", gpus=(GpuShare(7, 500),)))
    return Snapshot(nodes=(_node("a0", "A"), _node("b0", "B")), gangs=gangs, running=running,
                    policy=SolverPolicy(typical_pods=(WHOLE_ANY, WHOLE_B)))


def test_fgd_pass_with_the_steer_keeps_b_room_for_the_pod_that_needs_it() -> None:
    s = _half_b_left()

    def run(steered: bool) -> dict[str, str]:
        state = ClusterArrays(s)
        placer = GangPlacer(state, SolverName.FGD, np.random.default_rng(0),
                            steer=ModelSteer.of(state) if steered else None)
        out = {}
        for g in s.gangs:
            r = placer.place(g)
            out[g.name] = r if isinstance(r, str) else r.pods[0].node
        return out

    # FGD alone fills b0's half GPU with the pod that could go anywhere (a half GPU is a
    # fragment to the whole-GPU pods it expects), and the pod that needs B finds no room;
    # steered, B keeps its room (0 left < 0.5 x 0.1 x 8.5 GPUs free)
    plain = run(False)
    assert plain["g-any"] == "b0" and "no allowed node has room" in plain["g-b"]
    assert run(True) == {"g-any": "a0", "g-b": "b0"}


def test_the_search_steers_its_fgd_passes_and_fgd_itself_does_not() -> None:
    from solver.baselines import place

    s = _half_b_left()
    assert "g-b" not in place(s, SolverName.FGD, seed=0).admitted_names  # the baseline as is
    plan = search(s, ClusterArrays(s), seed=0, passes=2)
    assert not check(s, plan)
    assert plan.admitted_names == {"g-any", "g-b"}


# ------------------------------------------------------------------------------ generated

MODELS = ("A", "B", "C")


@st.composite
def mixed_clusters(draw: st.DrawFn) -> Snapshot:
    """Nodes of two or three models, partly busy; a target workload where some pods may run
    on some models only; a window of pods of any model and of some models."""
    models = MODELS[: draw(st.integers(2, 3))]
    nodes = []
    running = []
    for i in range(draw(st.integers(2, 8))):
        model = draw(st.sampled_from(models))
        n = draw(st.sampled_from((2, 4, 8)))
        nodes.append(Node(name=f"n{i}", cpu_milli=draw(st.sampled_from((8000, 32000))),
                          memory_mib=65536, gpus=tuple(GPU(index=j, model=model)
                                                       for j in range(n))))
        for j in range(n):
            used = draw(st.sampled_from((0, 0, 250, 500, 1000)))
            if used:
                running.append(Running(f"r{i}-{j}", f"n{i}", gpus=(GpuShare(j, used),)))
    sets = st.sampled_from([frozenset(), frozenset(), *(frozenset({m}) for m in models),
                            frozenset(models[:2])])
    shapes = st.tuples(st.sampled_from((1000, 4000)), st.sampled_from((1, 2)),
                       st.sampled_from((250, 500, 1000)), sets)
    workload = tuple(TypicalPod(cpu_milli=c, gpu_count=k, gpu_milli=m if k == 1 else 1000,
                                models=ms, weight=draw(st.floats(0.05, 1.0)))
                     for c, k, m, ms in draw(st.lists(shapes, min_size=1, max_size=5)))
    pods = draw(st.lists(shapes, min_size=1, max_size=12))
    gangs = tuple(Gang(name=f"g{i}", tenant="t", pods=(PodRequest(
        name=f"p{i}", cpu_milli=c, gpu_count=k, gpu_milli=m if k == 1 else 1000, models=ms),))
        for i, (c, k, m, ms) in enumerate(pods))
    return Snapshot(nodes=tuple(nodes), gangs=gangs, running=tuple(running),
                    policy=SolverPolicy(typical_pods=workload))


def _steered_plan(s: Snapshot, cached: bool) -> list[object]:
    state = ClusterArrays(s)
    if not cached:
        state.fgd_cache().applies = lambda pod: False  # type: ignore[method-assign]
    placer = GangPlacer(state, SolverName.FGD, np.random.default_rng(7),
                        steer=ModelSteer.of(state))
    return [placer.place(g) for g in s.gangs]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mixed_clusters())
def test_steered_fgd_cache_makes_the_long_ways_choices(s: Snapshot) -> None:
    assert _steered_plan(s, cached=True) == _steered_plan(s, cached=False)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(mixed_clusters(), snapshots()))
def test_prefer_is_a_nonempty_part_of_what_fits_and_never_holds_back_a_restricted_pod(
        s: Snapshot) -> None:
    state = ClusterArrays(s)
    steer = ModelSteer.of(state)
    if steer is None:
        return
    assert steer.need.min() >= 0.0 and steer.need.sum() <= 1.0 + 1e-9
    for g in s.gangs:
        for pod in g.pods:
            fit = state.node_fits(pod)
            if pod.gpu_count:
                fit = state.gpu_fits(pod, fit).sum(axis=1) >= pod.gpu_count
            prefer = steer.prefer(state, pod, fit)
            assert not (prefer & ~fit).any()
            assert prefer.any() == fit.any()
            models = {state.node_model[r] for r in np.flatnonzero(fit)}
            if len(models) == 1:  # nowhere else to go: never held back
                assert (prefer == fit).all()


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mixed_clusters())
def test_steered_search_plan_is_feasible(s: Snapshot) -> None:
    plan = search(s, ClusterArrays(s), seed=1, passes=3)
    assert not check(s, plan)


# ------------------------------------------------------------------------------ abuse


def test_a_flood_of_one_tenants_restricted_pods_keeps_only_its_weighted_part() -> None:
    """A tenant with pod rights in one namespace floods pods that may use model B only, to
    keep B from everyone else. The learned target workload mixes tenants by weight, so the
    flood's size does not move B's need past the tenant's weighted part (and a pod of another
    tenant still takes B where nothing else fits: test_a_pod_of_any_model_leaves_...)."""
    nodes = (_node("a0", "A"), _node("b0", "B"), _node("b1", "B"), _node("b2", "B"))
    tenants = (Tenant("a"), Tenant("b"))

    def need_after(flood: int) -> float:
        record = WorkloadRecord(3600.0)
        gangs = (Gang(name="ga", tenant="a", pods=(_pod("a-any"),)),
                 *(Gang(name=f"f{i}", tenant="b", pods=(_pod(f"f{i}", frozenset({"B"})),))
                   for i in range(flood)))
        record.observe(0.0, Snapshot(nodes=nodes, gangs=gangs, tenants=tenants))
        s = with_workload(Snapshot(nodes=nodes, tenants=tenants), record)
        state = ClusterArrays(s)
        steer = ModelSteer.of(state)
        assert steer is not None
        return float(steer.need[state.models.index("B")])

    assert need_after(10) == pytest.approx(need_after(10_000)) == pytest.approx(0.5)
