"""berth.dev/expected-runtime at CREATE: a tenant's estimate, read strictly and bounded by the
policy; what the release writes of a pod's run time is Berth's alone."""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from review_helpers import ROOT, fixture, policy_from
from test_review import decide

from admission import constants as c

FIELD = f"metadata.annotations[{c.ANNOTATION_EXPECTED_RUNTIME}]"


def _with(value: str, **annotations: str) -> dict[str, Any]:
    payload = fixture("plain-gpu-pod.json")
    ann = payload["request"]["object"]["metadata"].setdefault("annotations", {})
    ann[c.ANNOTATION_EXPECTED_RUNTIME] = value
    ann.update(annotations)
    return payload


@pytest.mark.parametrize("value", ["2h", "90m", "3600s", "1h30m", "168h", "604800s"])
def test_a_duration_within_the_bound_is_admitted_and_kept(value: str) -> None:
    decision, pod = decide(_with(value))
    assert decision.response["allowed"], decision.response
    assert pod["metadata"]["annotations"][c.ANNOTATION_EXPECTED_RUNTIME] == value
    assert not any(c.ANNOTATION_EXPECTED_RUNTIME in w
                   for w in decision.response.get("warnings") or [])


@pytest.mark.parametrize("value", [
    "2", "2d", "1.5h", "-1h", "0s", " 2h", "two hours", "²h", "PT2H", "9" * 5000, ""])
def test_a_malformed_duration_is_refused_naming_the_field_and_the_fix(value: str) -> None:
    decision, _ = decide(_with(value))
    assert not decision.response["allowed"] and decision.reason == "bad-expected-runtime"
    message = decision.response["status"]["message"]
    assert message.startswith(f"Berth: {FIELD}: ") and "is not a duration" in message
    assert "such as 2h, 90m, 1h30m or 3600s" in message and "remove it" in message
    assert len(message) < 400  # the value is quoted cut short


def test_a_duration_over_the_policy_bound_is_refused_with_the_bound() -> None:
    message = decide(_with("169h"))[0].response["status"]["message"]
    assert message.startswith(f"Berth: {FIELD}: '169h' is longer than the policy's "
                              "admission.maxExpectedRuntimeSeconds (168h)")
    assert "at most 168h" in message


def test_the_bound_is_the_policys() -> None:
    policy = policy_from("""\
        tenants: [{name: team-b, namespaces: [team-b]}]
        admission: {maxExpectedRuntimeSeconds: 3600}
        """)
    assert decide(_with("1h"), policy)[0].response["allowed"]
    message = decide(_with("61m"), policy)[0].response["status"]["message"]
    assert "(1h)" in message


def test_every_problem_is_listed_together() -> None:
    message = decide(_with("soon", **{c.ANNOTATION_PRIORITY: "1000"}))[0].response["status"][
        "message"]
    assert FIELD in message and c.ANNOTATION_PRIORITY in message


def test_a_pod_cannot_bring_berths_view_of_its_run_time() -> None:
    decision, pod = decide(_with("1h", **{c.ANNOTATION_EXPECTED_END: "2099-01-01T00:00:00Z",
                                          c.ANNOTATION_RUNTIME_SOURCE: "pod-deadline"}))
    ann = pod["metadata"]["annotations"]
    assert decision.response["allowed"]
    assert c.ANNOTATION_EXPECTED_END not in ann and c.ANNOTATION_RUNTIME_SOURCE not in ann
    warning = decision.response["warnings"][0]
    assert f"metadata.annotations[{c.ANNOTATION_EXPECTED_END}]" in warning
    assert f"metadata.annotations[{c.ANNOTATION_RUNTIME_SOURCE}]" in warning


def test_after_create_the_estimate_and_berths_view_are_berths_keys() -> None:
    """The berth-pod-keys policy (config/base/pod-keys-policy.yaml) refuses every change of a
    key under berth.dev/ by anyone but Berth after CREATE: the estimate is frozen with the pod,
    and what the release writes cannot be forged."""
    for key in (c.ANNOTATION_EXPECTED_RUNTIME, c.ANNOTATION_EXPECTED_END,
                c.ANNOTATION_RUNTIME_SOURCE):
        assert key.startswith(c.BERTH_PREFIX)
    assert c.berth_owned_annotation(c.ANNOTATION_EXPECTED_END)
    assert c.berth_owned_annotation(c.ANNOTATION_RUNTIME_SOURCE)
    assert not c.berth_owned_annotation(c.ANNOTATION_EXPECTED_RUNTIME)  # user input at CREATE
    (vap,) = [d for d in yaml.safe_load_all(
        (ROOT / "config" / "base" / "pod-keys-policy.yaml").read_text())
        if d["kind"] == "ValidatingAdmissionPolicy"]
    changed = {v["name"]: v["expression"] for v in vap["spec"]["variables"]}
    rule = changed["changedAnnotations"]
    assert rule.count("k.startsWith('berth.dev/')") == 2  # changed or removed, and added
    assert {v["expression"] for v in vap["spec"]["validations"]} >= {
        "size(variables.changedAnnotations) == 0"}
