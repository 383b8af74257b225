"""``berth status``: per tenant quota, used, borrowed and lent GPUs as the controller counts
them, the waiting gangs in the solver's order with the controller's reason, and what the
user's RBAC kept from view."""

from __future__ import annotations

import io
import json
from datetime import timedelta

import pytest

from admission import constants as c
from admission.cli import main
from admission.status import Status, StatusError, picture, read, render, status
from admission.status import keys as sk
from admission.status.report import TenantRow
from tests.admission.controller.harness import condition
from tests.admission.controller.objects import pod
from tests.admission.status.fakesource import POLICY_TEXT, FakeSource
from tests.admission.status.scene import Scene, quota_scene


def rows(st: Status) -> dict[str, TenantRow]:
    return {t.tenant: t for t in st.tenants}


def test_used_quota_and_waiting_gangs_are_the_controllers() -> None:
    s = quota_scene()
    st = status(s.picture())
    a = rows(st)["team-a"]
    assert (a.quota, a.used, a.borrowed, a.lent, a.borrowing, a.pods) == (8, 8, 0, 0, "no", 1)
    assert (a.waiting_gangs, a.waiting_gpus) == (2, 16)
    queued = [w for w in st.waiting if w.state == "queued"]
    assert [(w.gang, w.position) for w in queued] == [("team-a/w1", 1), ("team-a/w2", 2)]
    for w in queued:  # the reason is the one the controller wrote on the pods
        cond = condition(s.api, f"{w.gang}-0")
        assert cond is not None
        assert (w.reason, w.message) == (cond["reason"], cond["message"]) == (
            "Quota", cond["message"])
        assert w.message and "may not borrow" in w.message
    assert (queued[0].message or "").endswith("; 0 gangs ahead")
    assert (queued[1].message or "").endswith("; 1 gang ahead")
    assert st.cluster.gpus == 16 and st.cluster.held == 8 and st.cluster.free == 8
    assert st.reservations == [] and st.reclaims == []


def test_released_but_unbound_pods_count_as_used_like_the_controller() -> None:
    s = Scene()
    s.add("run-0", gang="run", gpus=8)
    s.cycle()  # released, not bound yet: its GPUs are held all the same
    assert rows(status(s.picture()))["team-a"].used == 8


def test_borrowed_and_lent() -> None:
    s = Scene(nodes=3)
    # team-c (quota 8, may borrow) holds 12: it borrows 4 of the 12 others leave idle.
    s.api.add_pod(pod("c0", ns="team-c", gpus=8, gated=False, node_name="n0"))
    s.api.add_pod(pod("c1", ns="team-c", gpus=4, gated=False, node_name="n1"))
    s.api.add_pod(pod("a0", ns="team-a", gpus=4, gated=False, node_name="n2"))
    s.api.add_pod(pod("x0", ns="ops", gpus=2, gated=False, node_name="n2",
                      tenant="ignored"))
    del s.api.pods["ops/x0"]["metadata"]["labels"]["berth.dev/tenant"]  # not Berth's
    st = status(s.picture())
    r = rows(st)
    assert (r["team-c"].used, r["team-c"].borrowed, r["team-c"].lent) == (12, 4, 0)
    # idle: team-a 4, team-b 8; 4 borrowed in all, lent in proportion
    assert (r["team-a"].lent, r["team-b"].lent) == (pytest.approx(1.333, abs=1e-3),
                                                    pytest.approx(2.667, abs=1e-3))
    assert st.cluster.held == 18 and st.cluster.held_outside_berth == 2
    assert st.cluster.free == 6


def test_a_gang_with_missing_pods_and_a_released_unbound_one_are_listed() -> None:
    s = Scene()
    s.add("inc-0", gang="inc", size=3)
    s.add("b-0", ns="team-b", gang="big", gpus=8)
    s.cycle()
    s.clock.advance(400)  # no scheduler binds team-b/b-0: the controller says so
    s.cycle()
    st = status(s.picture())
    by = {w.gang: w for w in st.waiting}
    assert by["team-a/inc"].state == "incomplete" and by["team-a/inc"].pods == 1
    assert by["team-a/inc"].size == 3 and by["team-a/inc"].reason == "GangIncomplete"
    assert by["team-b/big"].state == "not bound" and by["team-b/big"].reason == "NotBound"


def test_cluster_wide_list_forbidden_falls_back_to_the_policys_namespaces() -> None:
    s = quota_scene()
    s.add("b-0", ns="team-b", gpus=2)
    src = s.source(forbid={("list", "pods", None), ("list", "pods", "team-b")})
    view = read(src, policy_path=None)
    assert view.namespaces == ("team-a", "team-c")
    assert view.skipped == {"team-b": "cannot list pods (403)"}
    st = status(picture(view, s.now))
    assert rows(st)["team-a"].used == 8
    assert any("team-b" in n and "were not read" in n for n in st.notes)
    assert any("outside the policy's namespaces" in n for n in st.notes)
    out = io.StringIO()
    render.print_status(st, out)
    assert "skipped namespace team-b: cannot list pods (403)" in out.getvalue()


def test_no_readable_namespace_is_refused_with_what_to_ask_for() -> None:
    s = quota_scene()
    forbid = {("list", "pods", ns) for ns in (None, "team-a", "team-b", "team-c")}
    with pytest.raises(StatusError) as err:
        read(s.source(forbid=forbid), policy_path=None)
    msg = str(err.value)
    assert msg.startswith("your user cannot list pods in all namespaces nor in namespace "
                          "team-a, team-b, team-c (403); ask your cluster admin for 'list'")


def test_unauthorized_is_refused_at_once() -> None:
    s = quota_scene()
    with pytest.raises(StatusError, match=r"did not accept your credentials \(401\)"):
        read(s.source(unauthorized=True), policy_path="config/policy/minimal-policy.yaml")


def test_nodes_forbidden_counts_from_the_pods_and_says_so() -> None:
    s = quota_scene()
    st = status(s.picture(forbid={("list", "nodes", None)}))
    assert rows(st)["team-a"].used == 8
    assert st.cluster.free is None and st.cluster.held == 8
    assert any(n.startswith("nodes not read (your user cannot list nodes (cluster-scoped) "
                            "(403)") for n in st.notes)


def test_policy_from_configmap_file_and_refusals(tmp_path: object) -> None:
    s = quota_scene()
    with pytest.raises(StatusError) as err:
        read(s.source(forbid={("get", "configmaps", "berth-system")}), policy_path=None)
    assert "cannot get configmaps in namespace berth-system (403)" in str(err.value)
    assert "pass --policy FILE" in str(err.value)
    with pytest.raises(StatusError, match="no ConfigMap berth-system/berth-policy"):
        read(s.source(policy_text=None), policy_path=None)
    with pytest.raises(StatusError, match="the policy is not valid"):
        read(s.source(policy_text="tenants: 3\n"), policy_path=None)
    view = read(s.source(policy_text=None), policy_path="config/policy/minimal-policy.yaml")
    assert view.policy_source == "config/policy/minimal-policy.yaml"


def test_reservations_and_reclaims_appear_only_when_they_exist() -> None:
    s = quota_scene()
    out = io.StringIO()
    render.print_status(status(s.picture()), out)
    assert "Reservations" not in out.getvalue() and "reclaims" not in out.getvalue()
    s.api.pods["team-a/w1-0"]["metadata"]["annotations"][sk.ANNOTATION_RESERVATION] = \
        "n0 at 2026-11-29T15:00:00Z"
    s.api.events.append({
        "metadata": {"namespace": "team-b"}, "reason": sk.REASON_RECLAIMED,
        "message": "evicted to return 8 GPUs to team-a", "type": "Warning",
        "source": {"component": sk.EVENT_COMPONENT}, "lastTimestamp": "2026-11-29T14:00:05Z",
        "involvedObject": {"kind": "Pod", "namespace": "team-b", "name": "old-0"}})
    st = status(s.picture())
    assert [(r.gang, r.detail) for r in st.reservations] == [
        ("team-a/w1", "n0 at 2026-11-29T15:00:00Z")]
    assert [(r.pod, r.message) for r in st.reclaims] == [
        ("team-b/old-0", "evicted to return 8 GPUs to team-a")]
    out = io.StringIO()
    render.print_status(st, out)
    assert "Reservations (1)" in out.getvalue() and "Recent reclaims (1)" in out.getvalue()


def test_the_controllers_lease_says_who_leads() -> None:
    s = quota_scene()
    src = s.source()
    src.leases["berth-system/berth-controller"] = {"spec": {
        "holderIdentity": "berth-7c9", "leaseDurationSeconds": 15,
        "renewTime": (s.now - timedelta(seconds=3)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")}}
    assert status(picture(read(src, policy_path=None), s.now)).controller == \
        "leader berth-7c9 (Lease renewed 3s ago)"
    st = status(picture(read(src, policy_path=None), s.now + timedelta(seconds=60)))
    assert st.controller.startswith("no leader? berth-7c9's Lease was last renewed 63s ago "
                                    "by this machine's clock")
    st = status(s.picture(forbid={("get", "leases", "berth-system")}))
    assert st.controller.startswith("unknown (your user cannot get leases in namespace "
                                    "berth-system (403)")


def test_cli_table_and_json(monkeypatch: pytest.MonkeyPatch,
                            capsys: pytest.CaptureFixture[str]) -> None:
    s = quota_scene()
    src = s.source()
    connected = _connect(monkeypatch, src, s)
    assert main(["status", "-o", "json", "--context", "prod"]) == 0
    assert connected == [(None, "prod")]
    data = json.loads(capsys.readouterr().out)
    team_a = next(t for t in data["tenants"] if t["tenant"] == "team-a")
    assert (team_a["quota"], team_a["used"]) == (8, 8)
    assert [(w["gang"], w["position"], w["reason"]) for w in data["waiting"]] == [
        ("team-a/w1", 1, "Quota"), ("team-a/w2", 2, "Quota")]
    assert main(["status"]) == 0
    out = capsys.readouterr().out
    for text in ("Tenants (GPUs)", "team-a", "Waiting gangs (2)", "team-a/w1", "Quota",
                 "may not borrow; 0 gangs ahead"):
        assert text in out


def test_cli_refusal_is_one_line_and_exit_2(monkeypatch: pytest.MonkeyPatch,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    s = quota_scene()
    forbid = {("list", "pods", ns) for ns in (None, "team-a", "team-b", "team-c")}
    _connect(monkeypatch, s.source(forbid=forbid), s)
    assert main(["status"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith("berth status: your user cannot list pods")
    assert "(403); ask your cluster admin" in captured.err
    assert "Traceback" not in captured.err and captured.err.count("\n") == 1


def test_cli_without_credentials(monkeypatch: pytest.MonkeyPatch,
                                 capsys: pytest.CaptureFixture[str], tmp_path: object) -> None:
    missing = f"{tmp_path}/nope.kubeconfig"
    assert main(["status", "--kubeconfig", missing]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"berth status: cannot use the kubeconfig {missing}")


def _connect(monkeypatch: pytest.MonkeyPatch, src: FakeSource, s: Scene
             ) -> list[tuple[str | None, str | None]]:
    import admission.status as status_pkg
    from admission.status.source import Connection

    calls: list[tuple[str | None, str | None]] = []

    def connect(kubeconfig: str | None = None, context: str | None = None) -> Connection:
        calls.append((kubeconfig, context))
        return Connection(src, "team-a")

    monkeypatch.setattr(status_pkg, "connect", connect)
    # the pods' ages are judged against the fake clock's now, not the machine's
    from admission.status import model as pic_mod

    real = pic_mod.picture
    monkeypatch.setattr(status_pkg, "picture", lambda view, now: real(view, s.now))
    return calls


def test_gang_labels_are_berths_own() -> None:
    # a sanity check of the scene: gated pods carry Berth's gate, released ones its plan
    s = quota_scene()
    assert c.SCHEDULING_GATE in [g["name"] for g in
                                 s.api.pods["team-a/w1-0"]["spec"]["schedulingGates"]]


def test_a_forged_placement_is_not_counted_as_used() -> None:
    # A Pending pod of a namespace the policy does not manage, with no GPU resources, that
    # claims team-a and Berth's assignment of n0's 8 GPUs: the controller gives it nothing,
    # and neither does berth status.
    s = Scene()
    forged = pod("squat", ns="ops", tenant="team-a", gpus=8, gated=False)
    for section in ("limits", "requests"):
        forged["spec"]["containers"][0]["resources"][section].pop("nvidia.com/gpu")
    forged["metadata"]["annotations"].update({
        c.ANNOTATION_ASSIGNED_NODE: "n0", c.ANNOTATION_ASSIGNED_GPUS: "0,1,2,3,4,5,6,7",
        c.ANNOTATION_ASSIGNED_GPU_MILLI: ",".join(["1000"] * 8), c.ANNOTATION_PLAN: "forged"})
    s.api.add_pod(forged)
    assert rows(status(s.picture()))["team-a"].used == 0
    # Without the right to list nodes, status counts holders from the pods alone: the same.
    blind = s.picture(forbid={("list", "nodes", None)})
    assert not blind.nodes_known and rows(status(blind))["team-a"].used == 0


def test_gpus_held_through_resource_claims_count_as_used() -> None:
    from tests.admission.controller.test_dra import claim, dra_pod, slice_of, slice_only_node

    s = Scene()
    s.api.add_node(slice_only_node("dra-0"))
    s.api.add_dra("resourceslices", slice_of("dra-0", 8))
    s.api.add_dra("resourceclaims", claim("r0-gpu", 3, node_name="dra-0",
                                          devices=["gpu-0", "gpu-1", "gpu-2"], pods=["r0"]))
    s.api.add_pod(dra_pod("r0", 3, gated=False, node_name="dra-0"))
    st = status(s.picture())
    assert rows(st)["team-a"].used == 3
    # a user who may not list ResourceSlices is told what is missing
    denied = s.picture(forbid={("list", "resourceslices.resource.k8s.io", None)})
    assert any("resourceslices not read" in n for n in denied.view.notes)


KUEUE_POLICY = "".join(
    line + "\n" + (f"    queues: {{kueue: {line.split('[')[1].rstrip(']')}-queue}}\n"
                   if line.startswith("    namespaces: [") else "")
    for line in POLICY_TEXT.splitlines()) + "release:\n  backend: kueue\n"


def test_a_gang_kueue_has_not_admitted_is_at_its_queue() -> None:
    """With the Kueue backend a gang still behind Kueue's gate is not in Berth's queue: it
    shows as at its queue, with the controller's reason, and holds nothing."""
    s = Scene(text=KUEUE_POLICY)
    for k in range(2):
        s.add(f"kq-{k}", gang="kq", size=2, gpus=4, extra_gates=(c.KUEUE_GATE,),
              labels_extra={c.KUEUE_QUEUE_LABEL: "team-a-queue"})
    s.cycle()
    st = status(s.picture())
    (w,) = [w for w in st.waiting if w.gang == "team-a/kq"]
    assert (w.state, w.reason) == ("at its queue", None)  # not told yet: the grace
    out = io.StringIO()
    render.print_status(st, file=out)
    assert "its queue (Kueue) has not admitted it yet" in out.getvalue()
    s.cycle()
    st = status(s.picture())
    (w,) = [w for w in st.waiting if w.gang == "team-a/kq"]
    assert (w.state, w.reason, w.position) == ("at its queue", "QueueAdmission", None)
    assert w.message is not None and "Kueue has not admitted it yet" in w.message
    assert rows(st)["team-a"].used == 0
    out = io.StringIO()
    render.print_status(st, file=out)
    assert "at its queue" in out.getvalue()
