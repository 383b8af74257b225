"""Reservations on the real control plane (docs/reservations.md): a gang that cannot fit is
told when it should start, from the deadline of the pod it waits for, and the capacity it will
need is held: a pod with no deadline waits behind it, one whose deadline ends before the
reserved start backfills. A Job's own deadline shows on its released pods as their expected
end, but never lets them backfill (a Job's deadline may be raised afterwards).

The test has an A100 node of its own (8 GPUs; the shared fleet is H100 and the policy allows
only A100), and a policy that reserves for a gang as soon as it cannot fit.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from admission import constants as c
from e2e.berth import berth_webhook
from e2e.conftest import E2ECluster
from e2e.helpers import berth_gated, eventually, gpu_node, pod_manifest

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(bool(os.environ.get("BERTH_E2E_KUBECONFIG")),
                       reason="runs berth serve on this host; kind deploys it from config/"),
]

MODEL = "NVIDIA-A100-SXM4-80GB"


def _policy(doc: dict[str, Any]) -> None:
    doc["batch"]["windowSeconds"] = 1.5
    doc["solver"]["timeLimitSeconds"] = 1
    # the holders here end in about an hour: hold from two hours ahead (the default, 600 s,
    # would plan the reservation and hold nothing yet)
    doc["solver"]["reservations"] = {"maxGangs": 1, "afterSeconds": 0, "holdAheadSeconds": 7200}
    for tenant in doc["tenants"]:
        tenant["allowedModels"] = [MODEL]


@pytest.fixture
def a100_node(cluster: E2ECluster) -> Iterator[str]:
    with gpu_node(cluster.core, "resv", MODEL) as name:
        yield name


def _pod(name: str, gpus: int, deadline: int | None) -> dict[str, Any]:
    manifest = pod_manifest(name, gpus=gpus)
    if deadline is not None:
        manifest["spec"]["activeDeadlineSeconds"] = deadline
    return manifest


def _waiting(pod: Any) -> Any:
    for cond in pod.status.conditions or []:
        if cond.type == "berth.dev/Waiting":
            return cond
    return None


def _reserved_big(core: Any, ns: str, hook: Any) -> Any:
    """Half the A100 node for at most an hour ("holder"), and a gang that needs all of it
    ("big"), once it is told of its reservation (the serve log on failure)."""
    core.create_namespaced_pod(ns, _pod("holder", 4, 3600))
    eventually(lambda: core.read_namespaced_pod("holder", ns),
               lambda p: p.status.phase == "Running", timeout=90, what="holder to run")
    core.create_namespaced_pod(ns, _pod("big", 8, None))
    try:
        return eventually(lambda: core.read_namespaced_pod("big", ns),
                          lambda p: _waiting(p) is not None and _waiting(p).reason == "Reserved",
                          timeout=60, what="big to be told of its reservation")
    except AssertionError as exc:
        log = "\n".join(hook.log.read_text(errors="replace").splitlines()[-30:])
        raise AssertionError(f"{exc}\n--- berth serve log:\n{log}") from None


def test_a_gang_that_cannot_fit_is_reserved_and_only_a_short_pod_backfills(
    cluster: E2ECluster, tenant_namespaces: dict[str, str], tmp_path: Path, a100_node: str,
) -> None:
    ns = tenant_namespaces["team-a"]
    core = cluster.core
    with berth_webhook(cluster, tmp_path / "berth", tenant_namespaces, serve=True,
                       edit_policy=_policy) as hook:
        big = _reserved_big(core, ns, hook)
        message = _waiting(big).message
        assert message.startswith("waiting: reserved: expected to start at "), message
        assert a100_node in message
        # told as a time (rounded up to the minute), not as a countdown
        at = message.split("expected to start at ")[1].split(" ")[0]
        start = (datetime.strptime(at, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
                 - datetime.now(UTC)).total_seconds()
        assert 2900 < start <= 3660, message  # the holder's deadline, less its time so far
        # the 4 free GPUs are held: a pod without a deadline waits, one that ends in time runs
        core.create_namespaced_pod(ns, _pod("no-deadline", 1, None))
        core.create_namespaced_pod(ns, _pod("short", 1, 600))
        eventually(lambda: core.read_namespaced_pod("short", ns), lambda p: not berth_gated(p),
                   timeout=60, what="the short pod to backfill")
        time.sleep(6)  # four more windows
        assert berth_gated(core.read_namespaced_pod("no-deadline", ns))
        assert berth_gated(core.read_namespaced_pod("big", ns))
        # the pod kept out only by what is held says so, not that no node has room
        waiting = eventually(lambda: core.read_namespaced_pod("no-deadline", ns),
                             lambda p: _waiting(p) is not None
                             and _waiting(p).reason == "HeldForReservation",
                             timeout=30, what="no-deadline to be told its room is held")
        message = _waiting(waiting).message
        assert message.startswith(f"waiting: held: it fits now only in capacity held on "
                                  f"{a100_node} for a reserved gang expected to start at "), message
        assert "(this one has no deadline of its own)" in message and "big" not in message


def _job(name: str, gpus: int, deadline: int) -> dict[str, Any]:
    """A Job whose deadline is on the Job only (as `kubectl create job` and most ML launchers
    write it): its pods carry none of their own."""
    template = pod_manifest(name, gpus=gpus)
    template["spec"]["restartPolicy"] = "Never"
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name},
            "spec": {"activeDeadlineSeconds": deadline, "backoffLimit": 0,
                     "template": {"metadata": {"labels": {}}, "spec": template["spec"]}}}


def _job_pod(core: Any, ns: str, job: str) -> Any:
    pods = core.list_namespaced_pod(ns, label_selector=f"job-name={job}").items
    return pods[0] if pods else None


def test_a_jobs_deadline_shows_on_its_released_pod_and_never_lets_it_backfill(
    cluster: E2ECluster, tenant_namespaces: dict[str, str], tmp_path: Path, a100_node: str,
) -> None:
    # kwok's built-in stages complete a Job's pod as soon as it runs, so the Job's deadline
    # cannot hold a reservation here (tests/admission/controller/test_runtimes.py plans one);
    # what is checked on the real API server: the Job watch under config/base's rights, the
    # expected end the release writes, and that a Job's deadline does not backfill
    from kubernetes import client

    ns = tenant_namespaces["team-a"]
    core, batch = cluster.core, client.BatchV1Api(cluster.core.api_client)
    with berth_webhook(cluster, tmp_path / "berth", tenant_namespaces, serve=True,
                       edit_policy=_policy) as hook:
        batch.create_namespaced_job(ns, _job("timed", 1, 3600))
        try:
            timed = eventually(lambda: _job_pod(core, ns, "timed"),
                               lambda p: p is not None and not berth_gated(p),
                               timeout=60, what="the timed Job's pod to be released")
        except AssertionError as exc:
            log = "\n".join(hook.log.read_text(errors="replace").splitlines()[-30:])
            raise AssertionError(f"{exc}\n--- berth serve log:\n{log}") from None
        ann = timed.metadata.annotations or {}
        assert ann.get(c.ANNOTATION_RUNTIME_SOURCE) == "job-deadline", ann
        end = datetime.fromisoformat(ann[c.ANNOTATION_EXPECTED_END].replace("Z", "+00:00"))
        assert 3000 < (end - datetime.now(UTC)).total_seconds() <= 3600, ann
        eventually(lambda: core.read_namespaced_pod(timed.metadata.name, ns),
                   lambda p: p.status.phase == "Succeeded", timeout=60,
                   what="kwok to complete the timed Job's pod")
        _reserved_big(core, ns, hook)
        # a Job's deadline can be raised after the fact, so its pod never backfills on it; a
        # pod's own deadline cannot, so that pod does
        batch.create_namespaced_job(ns, _job("short-job", 1, 600))
        core.create_namespaced_pod(ns, _pod("short", 1, 600))
        eventually(lambda: core.read_namespaced_pod("short", ns), lambda p: not berth_gated(p),
                   timeout=60, what="the short pod to backfill")
        short_job = eventually(lambda: _job_pod(core, ns, "short-job"),
                               lambda p: p is not None, timeout=30,
                               what="the short Job's pod to be created")
        time.sleep(6)  # four more windows
        assert berth_gated(core.read_namespaced_pod(short_job.metadata.name, ns))
        assert berth_gated(core.read_namespaced_pod("big", ns))
        # its Job's deadline is no deadline of its own: held capacity is not its to use
        held = eventually(lambda: core.read_namespaced_pod(short_job.metadata.name, ns),
                          lambda p: _waiting(p) is not None
                          and _waiting(p).reason == "HeldForReservation",
                          timeout=30, what="the short Job's pod to be told its room is held")
        assert "(this one has no deadline of its own)" in _waiting(held).message


@pytest.mark.parametrize("keep", [True, False], ids=["keep", "replan"])
def test_a_kept_reservation_keeps_its_place_ahead_of_a_later_gang_that_ranks_higher(
    cluster: E2ECluster, tenant_namespaces: dict[str, str], tmp_path: Path, a100_node: str,
    keep: bool,
) -> None:
    # one reservation at a time; a later gang with a short deadline gains the short-run bonus
    # and ranks above the reserved one. Re-planned afresh every window (the default) it takes
    # the reservation; with solver.reservations.keep the first gang keeps it
    def policy(doc: dict[str, Any]) -> None:
        _policy(doc)
        doc["solver"]["reservations"]["keep"] = keep

    ns = tenant_namespaces["team-a"]
    core = cluster.core
    with berth_webhook(cluster, tmp_path / "berth", tenant_namespaces, serve=True,
                       edit_policy=policy) as hook:
        _reserved_big(core, ns, hook)
        # 6 GPUs do not fit beside the holder either; a deadline of 600 s is worth 0.83 of
        # a priority point, far more than big's few seconds of aging
        core.create_namespaced_pod(ns, _pod("later", 6, 600))
        first, second = ("big", "later") if keep else ("later", "big")
        eventually(lambda: core.read_namespaced_pod(first, ns),
                   lambda p: _waiting(p) is not None and _waiting(p).reason == "Reserved",
                   timeout=30, what=f"{first} to hold the reservation")
        other = eventually(lambda: core.read_namespaced_pod(second, ns),
                           lambda p: _waiting(p) is not None and _waiting(p).reason == "Deferred",
                           timeout=30, what=f"{second} to wait without one")
        assert _waiting(other).message.endswith("; 1 gang ahead"), _waiting(other).message
        time.sleep(6)  # four more windows: nothing moves
        assert _waiting(core.read_namespaced_pod(first, ns)).reason == "Reserved"
        assert _waiting(core.read_namespaced_pod(second, ns)).reason == "Deferred"
        assert berth_gated(core.read_namespaced_pod("big", ns))
        assert berth_gated(core.read_namespaced_pod("later", ns))
