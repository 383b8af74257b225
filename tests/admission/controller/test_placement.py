"""KEP-3838 patch rules: pin by required affinity, append to every term, remove only Berth's
gate, idempotent, and every patch accepted by an API server that enforces the rules."""

from __future__ import annotations

import pytest

from admission import constants as c
from admission import jsonpatch
from admission.controller import placement as pl
from admission.controller.api import Conflict
from tests.admission.controller.fakeapi import FakeApi, validate_pod_update
from tests.admission.controller.objects import pod

PIN = {"key": "metadata.name", "operator": "In", "values": ["n1"]}
RACK = {"key": "topology.kubernetes.io/rack", "operator": "In", "values": ["rack-1"]}
ZONE = {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["z"]}


def released(p: dict, node: str = "n1") -> dict:
    new = jsonpatch.apply(p, pl.release_ops(p, node))
    validate_pod_update(p, new)  # the API server's rules
    assert pl.tightening_errors(p, new) == []
    return new


def terms(p: dict) -> list[dict]:
    return p["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]


def test_sets_required_affinity_when_there_is_none() -> None:
    new = released(pod("a"))
    assert terms(new) == [{"matchFields": [PIN]}]
    assert "schedulingGates" not in new["spec"] or new["spec"]["schedulingGates"] == []


def test_appends_to_every_existing_term() -> None:
    p = pod("a", affinity_terms=[{"matchExpressions": [RACK]}, {"matchExpressions": [ZONE]}])
    new = released(p)
    assert terms(new) == [{"matchExpressions": [RACK], "matchFields": [PIN]},
                          {"matchExpressions": [ZONE], "matchFields": [PIN]}]


def test_keeps_existing_match_fields_and_appends() -> None:
    other = {"key": "metadata.name", "operator": "NotIn", "values": ["bad"]}
    p = pod("a", affinity_terms=[{"matchFields": [other]}])
    assert terms(released(p)) == [{"matchFields": [other, PIN]}]


def test_affinity_object_without_node_affinity() -> None:
    p = pod("a")
    anti = {"preferredDuringSchedulingIgnoredDuringExecution": []}
    p["spec"]["affinity"] = {"podAntiAffinity": anti}
    new = released(p)
    assert terms(new) == [{"matchFields": [PIN]}]
    assert "podAntiAffinity" in new["spec"]["affinity"]


def test_removes_only_berths_gate() -> None:
    p = pod("a", extra_gates=(c.KUEUE_GATE,))
    p["spec"]["schedulingGates"].insert(0, p["spec"]["schedulingGates"].pop())  # kueue's first
    new = released(p)
    assert new["spec"]["schedulingGates"] == [{"name": c.KUEUE_GATE}]


def test_release_is_idempotent() -> None:
    new = released(pod("a"))
    assert pl.release_ops(new, "n1") == []
    assert pl.is_pinned(new, "n1")


def test_placement_ops_are_idempotent_and_create_missing_maps() -> None:
    p = pod("a")
    del p["metadata"]["labels"]
    ops = pl.placement_ops(p, annotations_={"x/y": "1"}, labels_={"l": "v"})
    new = jsonpatch.apply(p, ops)
    assert new["metadata"]["labels"] == {"l": "v"}
    assert new["metadata"]["annotations"]["x/y"] == "1"
    assert pl.placement_ops(new, annotations_={"x/y": "1"}, labels_={"l": "v"}) == []


def test_guarded_by_uid_and_gate() -> None:
    p = pod("a")
    ops = pl.release_ops(p, "n1")
    other = pod("a")
    other["metadata"]["uid"] = "recreated"
    with pytest.raises(jsonpatch.PatchConflict):
        jsonpatch.apply(other, ops)


@pytest.mark.parametrize("mutate, message", [
    (lambda s: s["schedulingGates"].append({"name": "x/y"}), "never added"),
    (lambda s: s.__setitem__("nodeSelector", {"kubernetes.io/os": "windows"}), "nodeSelector"),
    (lambda s: s.__setitem__("schedulerName", "volcano"), "schedulerName"),
    (lambda s: s["tolerations"].pop(0), "tolerations"),
])
def test_tightening_errors_name_the_field(mutate, message) -> None:
    old = pod("a")
    old["spec"]["nodeSelector"] = {"kubernetes.io/os": "linux"}
    new = jsonpatch.apply(old, [])
    mutate(new["spec"])
    errors = pl.tightening_errors(old, new)
    assert errors and message in " ".join(errors)


def test_fake_api_server_accepts_the_release() -> None:
    api = FakeApi()
    p = api.add_pod(pod("a", affinity_terms=[{"matchExpressions": [RACK]}]))
    api.patch_pod("team-a", "a", pl.release_ops(p, "n1"))
    stored = api.pods["team-a/a"]
    assert terms(stored)[0]["matchFields"] == [PIN]
    api.bind("team-a/a", "n1")


def test_fake_api_server_refuses_a_release_of_a_recreated_pod() -> None:
    api = FakeApi()
    p = api.add_pod(pod("a"))
    ops = pl.release_ops(p, "n1")
    api.pods["team-a/a"]["metadata"]["uid"] = "recreated"
    before = api.pods["team-a/a"]
    with pytest.raises(Conflict) as refused:
        api.patch_pod("team-a", "a", ops)
    assert refused.value.status == 422 and "test failed at /metadata/uid" in refused.value.message
    assert api.pods["team-a/a"] is before and api.patches == []
