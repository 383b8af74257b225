"""The solver runs in a worker process with a deadline; a worker that does not answer in time
is killed and the window falls back to the greedy plan; the worker is started before the first
batch needs it, and again as soon as one is replaced."""

from __future__ import annotations

from admission.controller.controller import Controller
from admission.controller.snapshot import build
from admission.controller.solving import WorkerSolver
from solver.checker import check
from tests.admission.controller.fakeapi import FakeApi
from tests.admission.controller.harness import controller, settings
from tests.admission.controller.objects import FakeClock, node, pod


def snapshot():
    api = FakeApi()
    api.add_node(node("n0"))
    for i in range(3):
        api.add_pod(pod(f"p{i}", gpus=2))
    ctl = controller(api, FakeClock())
    return build(ctl.inventory.view(), ctl.settings, FakeClock()()).snapshot


def test_worker_process_solves_with_cpsat() -> None:
    snap = snapshot()
    worker = WorkerSolver(solver="cpsat", time_limit=2.0, grace_seconds=60)
    try:
        plan = worker(snap)
    finally:
        worker.close()
    assert len(plan.admitted) == 3 and not check(snap, plan)
    assert plan.stats.solver == "cpsat" and not plan.stats.fallback


def _processes(worker: WorkerSolver) -> set[int]:
    pool = worker._pool
    return set(getattr(pool, "_processes", None) or {})


def test_a_warmed_worker_is_the_one_that_solves() -> None:
    worker = WorkerSolver(solver="cpsat", time_limit=2.0, grace_seconds=60)
    try:
        worker.warm().result(timeout=120)  # imported the solver without error
        started = _processes(worker)
        assert len(started) == 1
        snap = snapshot()
        plan = worker(snap)
        assert _processes(worker) == started  # no second process: the first batch's is ready
        assert len(plan.admitted) == 3 and not check(snap, plan)
    finally:
        worker.close()


def test_the_controller_starts_its_worker_with_itself() -> None:
    api = FakeApi()
    api.add_node(node("n0"))
    ctl = Controller(api=api, settings=settings(), identity="r0")
    assert ctl._worker is not None and not _processes(ctl._worker)
    ctl.start()
    try:
        assert len(_processes(ctl._worker)) == 1
    finally:
        ctl.stop()


def test_no_answer_in_time_falls_back_to_greedy() -> None:
    snap = snapshot()
    # A deadline nobody can meet (spawning the worker alone takes longer).
    worker = WorkerSolver(solver="cpsat", time_limit=0.01, grace_seconds=0.0)
    try:
        plan = worker(snap)
        assert len(_processes(worker)) == 1  # the next window's worker, started at once
    finally:
        worker.close(kill=True)
    assert plan.stats.fallback and plan.stats.status == "GREEDY"
    assert len(plan.admitted) == 3 and not check(snap, plan)


def test_no_fallback_defers_everything_with_the_reason() -> None:
    snap = snapshot()
    worker = WorkerSolver(solver="cpsat", time_limit=0.01, grace_seconds=0.0, fallback=None)
    try:
        plan = worker(snap)
    finally:
        worker.close(kill=True)
    assert not plan.admitted and {d.reason for d in plan.deferred} == {
        "the solver did not answer in time; retrying next window"}
