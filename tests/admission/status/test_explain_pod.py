"""``berth explain POD``: why one pod waits, from what the cluster shows, and what would let it
start; what cannot be known is said to be unknown."""

from __future__ import annotations

import json

import pytest

from admission import constants as c
from admission.cli import main
from admission.status import Explanation, explain, picture, read, read_pod, with_pod
from tests.admission.controller.objects import pod
from tests.admission.status.fakesource import FakeSource
from tests.admission.status.scene import Scene, quota_scene
from tests.admission.status.test_status import _connect


def explain_in(s: Scene, key: str, src: FakeSource | None = None) -> Explanation:
    src = src or s.source()
    ns, name = key.split("/")
    target = read_pod(src, ns, name)
    view = read(src, policy_path=None, events=False)
    with_pod(view, target.pod)
    return explain(picture(view, s.now), target.pod, target.events, podgroup=target.podgroup,
                   podgroup_error=target.podgroup_error, events_error=target.events_error)


def text(ex: Explanation) -> str:
    return "\n".join(ex.why + ex.needs + ex.unknown)


def test_a_gang_waiting_at_quota_with_borrowing_disabled() -> None:
    s = quota_scene()
    ex = explain_in(s, "team-a/w2-1")
    assert (ex.state, ex.tenant, ex.gang, ex.position, ex.ahead) == (
        "waiting", "team-a", "team-a/w2", 2, 1)
    assert ex.condition is not None and ex.condition["reason"] == "Quota"
    assert ex.demand == "2 pods x 4 GPUs"
    assert any(w.startswith("the controller says (Quota): waiting: quota: tenant team-a") for w
               in ex.why)
    assert "tenant team-a at quota: it uses 8 of its 8 GPUs and this gang needs 8" in ex.why
    assert ex.needs[0] == ("8 of team-a's GPUs must free up first: borrowing is disabled for "
                           "team-a in the policy")
    assert ex.needs[1].startswith("team-a's GPUs free up when its own pods end; Berth cannot "
                                  "know when")
    assert "team-a/run-0 (8 GPU on n0" in ex.needs[1]
    assert any(n.startswith("1 gang of team-a comes first in the solver's order") and
               n.endswith("team-a/w1") for n in ex.needs)
    assert [e["reason"] for e in ex.events] == ["Quota"]  # the controller's Event


def test_a_gang_that_needs_more_than_the_largest_free_block() -> None:
    s = Scene(nodes=2)
    s.add("busy", ns="team-c", gpus=4)  # team-c holds 4 GPUs of n0 once released
    s.cycle()
    s.bind_released()
    for k in range(2):
        s.add(f"wide-{k}", ns="team-b", gang="wide", size=2, gpus=6,
              annotations_extra={c.ANNOTATION_TOPOLOGY: "required:rack"})
    s.cycle()
    ex = explain_in(s, "team-b/wide-0")
    assert ex.state == "waiting" and ex.demand == "2 pods x 6 GPUs, required:rack"
    assert any(w.startswith("it does not fit in the free capacity now, even alone") for w in
               ex.why)
    assert ("needs 2 pods x 6 free GPUs (any model) on one node: the largest free block on a "
            "node it may use is 8 free GPUs (n1); 1 of 2 such nodes have room for one pod"
            in ex.needs)
    assert "all 2 in one rack: at most 1 such pod fit in one rack now (rack-1)" in ex.needs


def test_a_model_no_node_has() -> None:
    s = Scene()
    s.add("a100-0", ns="team-c", gpus=1,
          annotations_extra={c.ANNOTATION_ALLOWED_MODELS: "NVIDIA-A100-SXM4-80GB"})
    s.cycle()
    ex = explain_in(s, "team-c/a100-0")
    assert any(n.startswith("needs 1 pod x 1 free GPU (NVIDIA-A100-SXM4-80GB) on one node: "
                            "no node may run it at all (no GPU of model "
                            "NVIDIA-A100-SXM4-80GB: 2 nodes); it can start only once such a "
                            "node exists")
               for n in ex.needs), ex.needs


def test_an_incomplete_gang_needs_its_missing_pods() -> None:
    s = Scene()
    s.add("inc-0", gang="inc", size=3)
    s.cycle()
    ex = explain_in(s, "team-a/inc-0")
    assert ex.state == "incomplete" and ex.gang_pods == "1 of 3 pods: 1 gated, 0 released"
    assert ex.needs == ["the gang's other 2 pods must exist: team-a/inc has 1 of 3 "
                        "(berth.dev/gang-size); it is considered once all exist"]


def test_a_gang_that_fits_and_has_quota_is_only_waiting_for_the_window() -> None:
    s = Scene()
    s.add("new-0", ns="team-c", gpus=2)
    ex = explain_in(s, "team-c/new-0")  # before any cycle: the controller said nothing yet
    assert ex.condition is None
    assert any("has not said why yet" in w for w in ex.why)
    assert "tenant team-c has room: it uses 0 of its 8 GPUs and this gang needs 2" in ex.why
    assert ex.needs == ["nothing visible keeps it out now: it fits on its own and its tenant "
                        "has quota; the controller decides at its next batch window (every "
                        "10s)"]


def test_a_gang_kept_out_by_held_room_is_not_told_nothing_keeps_it_out() -> None:
    s = Scene()
    s.add("held-0", ns="team-c", gpus=2)  # gated; the controller's word set below
    s.api.pods["team-c/held-0"].setdefault("status", {})["conditions"] = [{
        "type": "berth.dev/Waiting", "status": "True", "reason": "HeldForReservation",
        "message": "waiting: held: it fits now only in capacity held on n0 for a reserved "
                   "gang expected to start at 2026-12-07T19:28:00Z; only a gang whose own "
                   "deadline ends before then may use it (this one has no deadline of its "
                   "own); 0 gangs ahead"}]
    ex = explain_in(s, "team-c/held-0")
    assert any(w.startswith("it fits in the free capacity now") for w in ex.why)
    assert ex.needs[0].startswith("the room it fits in is held for another gang's "
                                  "reservation"), ex.needs
    assert not any(n.startswith("nothing visible keeps it out") for n in ex.needs)


def test_released_pods_show_berths_plan() -> None:
    s = Scene()
    s.add("run-0", gpus=2)
    s.cycle()
    ex = explain_in(s, "team-a/run-0")
    assert ex.state == "released, not bound"
    assert ex.plan[c.ANNOTATION_ASSIGNED_NODE] in ("n0", "n1")
    assert ex.needs[0].startswith("default-scheduler must bind it to n")
    s.bind_released()
    ex = explain_in(s, "team-a/run-0")
    assert ex.state == "bound" and ex.phase == "Running"
    assert any(w.startswith("bound to node n") for w in ex.why) and ex.needs == []


def test_volcano_and_kueue_gates_are_named() -> None:
    s = Scene()
    s.add("v-0", gpus=1)
    s.cycle()
    p = s.api.pods["team-a/v-0"]
    p["spec"]["schedulerName"] = "volcano"
    p["metadata"]["annotations"][c.VOLCANO_GROUP_ANNOTATION] = "berth-v-0"
    p["metadata"]["annotations"][c.VOLCANO_QUEUE_ANNOTATION] = "team-a"
    src = s.source()
    src.custom["podgroups/team-a/berth-v-0"] = {"status": {"phase": "Pending", "conditions": [
        {"type": "Unschedulable", "reason": "NotEnoughResources",
         "message": "queue team-a is closed"}]}}
    ex = explain_in(s, "team-a/v-0", src)
    assert ("Volcano schedules it with PodGroup berth-v-0 in queue team-a: phase Pending "
            "(NotEnoughResources queue team-a is closed)") in ex.why
    assert ex.needs[-1] == "Berth's part is done: Volcano decides now"
    s.add("k-0", gpus=1, extra_gates=(c.KUEUE_GATE,), labels_extra={
        c.KUEUE_QUEUE_LABEL: "team-a-queue"})
    ex = explain_in(s, "team-a/k-0")
    assert any(w.startswith("after Berth: Kueue's gate kueue.x-k8s.io/admission is on: Kueue "
                            "admits the pod's Workload from LocalQueue team-a-queue") for w in
               ex.why)


def test_a_pod_berth_does_not_hold() -> None:
    s = Scene()
    s.api.add_pod(pod("web", ns="ops", gpus=1, gated=False, node_name="n0"))
    ex = explain_in(s, "ops/web")
    assert ex.state == "bound"
    assert ex.why[0] == ("namespace ops is not in the policy: Berth's webhook lets its pods "
                         "pass untouched")


def test_a_pod_in_a_namespace_the_user_cannot_list_is_still_explained() -> None:
    s = quota_scene()
    src = s.source(forbid={("list", "pods", None), ("list", "pods", "team-a")})
    ex = explain_in(s, "team-a/w1-0", src)
    # its gang-mate was never listed: no guess about the gang, the controller's word only
    assert ex.state == "waiting" and ex.gang_pods is None and ex.needs == []
    assert ex.why[0].startswith("the controller says (Quota)")
    assert ex.unknown[0].startswith("pods of namespace team-a could not be listed")
    src = s.source(forbid={("list", "pods", None), ("list", "pods", "team-b")})
    ex = explain_in(s, "team-a/w1-0", src)
    assert any("namespace team-b could not be read" in u for u in ex.unknown)


def test_cli_explain(monkeypatch: pytest.MonkeyPatch,
                     capsys: pytest.CaptureFixture[str]) -> None:
    s = quota_scene()
    _connect(monkeypatch, s.source(), s)
    assert main(["explain", "w1-0", "-o", "json"]) == 0  # -n defaults to the context's
    data = json.loads(capsys.readouterr().out)
    assert (data["pod"], data["position"], data["condition"]["reason"]) == (
        "team-a/w1-0", 1, "Quota")
    assert main(["explain", "team-a/w2-0"]) == 0
    out = capsys.readouterr().out
    for t in ("Pod team-a/w2-0: waiting", "What would let it start",
              "borrowing is disabled for team-a in the policy", "2 in team-a's queue"):
        assert t in out
    assert main(["explain", "nope", "-n", "team-a"]) == 2
    assert capsys.readouterr().err == ("berth explain: no pod nope in namespace team-a (pass "
                                       "-n NAMESPACE)\n")


def test_cli_explain_forbidden(monkeypatch: pytest.MonkeyPatch,
                               capsys: pytest.CaptureFixture[str]) -> None:
    s = quota_scene()
    _connect(monkeypatch, s.source(forbid={("get", "pods", "team-a")}), s)
    assert main(["explain", "w1-0"]) == 2
    err = capsys.readouterr().err
    assert err == ("berth explain: your user cannot get pods in namespace team-a (403); ask "
                   "your cluster admin for 'get' on pods through a Role or RoleBinding in "
                   "namespace team-a\n")
