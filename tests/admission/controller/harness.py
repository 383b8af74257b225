"""A controller wired to the in-memory API server and a fake clock, as the tests use it."""

from __future__ import annotations

from collections.abc import Callable

from admission.controller.controller import Controller
from admission.controller.settings import Settings
from admission.policy import Sharing
from solver.api import solve
from solver.plan import Plan
from solver.types import Snapshot, Tenant
from tests.admission.controller.fakeapi import FakeApi
from tests.admission.controller.objects import FakeClock, node, pod

TOPO = {"rack": "topology.kubernetes.io/rack", "block": "topology.kubernetes.io/block"}


def settings(**kw: object) -> Settings:
    base: dict[str, object] = dict(
        tenants=(Tenant("team-a"), Tenant("team-b")), topology_labels=TOPO,
        namespaces={"team-a": "team-a", "team-b": "team-b"},
        sharing=Sharing(backend="time-slicing"),
        window_seconds=10.0, gang_timeout_seconds=300.0, solver="cpsat",
        time_limit_seconds=2.0,
        # Most tests read what one cycle says; test_cycle_quiet.py tests the grace.
        explain_grace_batches=0)
    base.update(kw)
    return Settings(**base)  # type: ignore[arg-type]


def solver_fn(name: str = "cpsat", time_limit: float = 2.0) -> Callable[[Snapshot], Plan]:
    return lambda snap: solve(snap, solver=name, time_limit=time_limit)  # type: ignore[arg-type]


def controller(api: FakeApi, clock: FakeClock, *, s: Settings | None = None,
               solve_fn: Callable[[Snapshot], Plan] | None = None,
               identity: str = "replica-0") -> Controller:
    ctl = Controller(api=api, settings=s or settings(), identity=identity, clock=clock,
                     solve=solve_fn or solver_fn(), fast_solve=solver_fn("bestfit"))
    ctl.relist()
    return ctl


def gates(api: FakeApi, key: str) -> list[str]:
    return [g["name"] for g in api.pods[key]["spec"].get("schedulingGates") or []]


def pinned_node(api: FakeApi, key: str) -> str | None:
    aff = (api.pods[key]["spec"].get("affinity") or {}).get("nodeAffinity") or {}
    terms = (aff.get("requiredDuringSchedulingIgnoredDuringExecution") or {}).get(
        "nodeSelectorTerms") or []
    nodes = {f["values"][0] for t in terms for f in t.get("matchFields") or []
             if f["key"] == "metadata.name" and f["operator"] == "In"}
    assert len(nodes) <= 1
    return next(iter(nodes), None)


def condition(api: FakeApi, key: str) -> dict | None:
    for c in (api.pods[key].get("status") or {}).get("conditions") or []:
        if c["type"] == "berth.dev/Waiting":
            return c
    return None


def gang_cluster(gangs: list[tuple[int, int]], nodes: int) -> FakeApi:
    """``nodes`` 8-GPU nodes and, per (size, gpus) in ``gangs``, a gang g<i> of ``size`` pods
    asking ``gpus`` each (pods g<i>-0, g<i>-1, ... in team-a)."""
    api = FakeApi()
    for i in range(nodes):
        api.add_node(node(f"n{i}", gpus=8))
    for g, (size, gpus) in enumerate(gangs):
        for k in range(size):
            api.add_pod(pod(f"g{g}-{k}", gang=f"g{g}", size=size, gpus=gpus))
    return api
