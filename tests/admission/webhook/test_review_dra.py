"""The review of pods that ask for GPUs through DRA ResourceClaims (docs/dra.md)."""

from __future__ import annotations

import random
import string
from typing import Any

import pytest
from review_helpers import SAMPLE, apply_patch

from admission import constants as c
from admission.dra import TEMPLATE, ClaimProblem, gpu_ask, pod_ask
from admission.dra.claims import CLAIM
from admission.policy import load_policy
from admission.webhook import parse_review, review

POLICY = load_policy(SAMPLE)
A100 = "NVIDIA-A100-SXM4-80GB"


def template(*requests: dict[str, Any], constraints: list[Any] | None = None) -> dict[str, Any]:
    devices: dict[str, Any] = {"requests": list(requests)}
    if constraints is not None:
        devices["constraints"] = constraints
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
            "metadata": {"name": "gpus", "namespace": "team-a"},
            "spec": {"spec": {"devices": devices}}}


def gpus(count: int = 1, *selectors: str, cls: str = c.DRA_GPU_CLASS,
         **extra: Any) -> dict[str, Any]:
    exactly: dict[str, Any] = {"deviceClassName": cls, "count": count, **extra}
    if selectors:
        exactly["selectors"] = [{"cel": {"expression": s}} for s in selectors]
    return {"name": "gpu", "exactly": exactly}


def model_is(*models: str) -> str:
    attr = 'device.attributes["gpu.nvidia.com"].productName'
    if len(models) == 1:
        return f'{attr} == "{models[0]}"'
    return f"{attr} in [{', '.join(repr(m) for m in models)}]"


def pod_request(claims: list[dict[str, Any]], *, namespace: str = "team-a",
                limits: dict[str, str] | None = None,
                annotations: dict[str, str] | None = None) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "train", "image": "trainer:1",
                                 "resources": {"claims": [{"name": x["name"]} for x in claims]}}
    if limits:
        container["resources"]["limits"] = limits
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": "p", "namespace": namespace, "annotations": annotations or {}},
           "spec": {"containers": [container], "resourceClaims": claims}}
    payload = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
               "request": {"uid": "u1", "kind": {"group": "", "version": "v1", "kind": "Pod"},
                           "namespace": namespace, "operation": "CREATE", "object": pod}}
    return parse_review(payload)[1]  # type: ignore[return-value]


def by_template(name: str = "gpus") -> list[dict[str, Any]]:
    return [{"name": "gpu", "resourceClaimTemplateName": name}]


def decide(request: dict[str, Any], objects: dict[tuple[str, str], Any]) -> tuple[Any, Any]:
    decision = review(request, POLICY, objects)
    pod = request["object"]
    if "patch" in decision.response:
        pod = apply_patch(pod, decision.response["patch"])
    return decision, pod


def message(decision: Any) -> str:
    assert not decision.response["allowed"], decision.response
    return str(decision.response["status"]["message"])


def test_two_gpus_of_an_allowed_model_are_gated_and_tagged() -> None:
    decision, pod = decide(pod_request(by_template()),
                           {(TEMPLATE, "gpus"): template(gpus(2, model_is(A100)))})
    assert decision.outcome == "mutated", decision.response
    ann = pod["metadata"]["annotations"]
    assert ann[c.ANNOTATION_GPU_COUNT] == "2" and ann[c.ANNOTATION_GPU_MILLI] == "1000"
    assert ann[c.ANNOTATION_ALLOWED_MODELS] == A100
    assert ann[c.ANNOTATION_SHARING] == "dra"
    assert pod["metadata"]["labels"][c.LABEL_TENANT] == "team-a"
    assert pod["spec"]["schedulingGates"] == [{"name": c.SCHEDULING_GATE}]
    # no device-plugin resource is added: the claim is what the scheduler allocates
    assert "limits" not in pod["spec"]["containers"][0]["resources"]


def test_a_forbidden_model_in_a_selector_is_refused_naming_the_claim() -> None:
    decision, _ = decide(pod_request(by_template(), namespace="team-b"),
                         {(TEMPLATE, "gpus"): template(gpus(1, model_is("NVIDIA-H100-80GB-HBM3")))})
    text = message(decision)
    assert "spec.resourceClaims[0].resourceClaimTemplateName" in text
    assert "NVIDIA-H100-80GB-HBM3 is not allowed for tenant 'team-b'" in text
    assert A100 in text  # the fix: the models the tenant may use


def test_no_selector_means_the_tenants_models() -> None:
    decision, pod = decide(pod_request(by_template(), namespace="team-b"),
                           {(TEMPLATE, "gpus"): template(gpus(1))})
    assert decision.outcome == "mutated"
    assert pod["metadata"]["annotations"][c.ANNOTATION_ALLOWED_MODELS] == A100


def test_over_the_tenants_gpus_per_pod_is_refused() -> None:
    decision, _ = decide(pod_request(by_template(), namespace="team-b"),
                         {(TEMPLATE, "gpus"): template(gpus(5))})
    assert "5 GPUs exceed tenant 'team-b'" in message(decision)


def test_a_missing_template_is_refused_with_the_fix() -> None:
    decision, _ = decide(pod_request(by_template("nope")), {(TEMPLATE, "nope"): None})
    assert "ResourceClaimTemplate 'nope' does not exist" in message(decision)
    assert "create it before the pod" in message(decision)


def test_a_claim_by_name_counts_its_gpus() -> None:
    claims = [{"name": "gpu", "resourceClaimName": "shared"}]
    claim = {"spec": template(gpus(3))["spec"]["spec"]}
    decision, pod = decide(pod_request(claims), {(CLAIM, "shared"): claim})
    assert decision.outcome == "mutated"
    assert pod["metadata"]["annotations"][c.ANNOTATION_GPU_COUNT] == "3"


def test_claims_of_other_classes_leave_the_pod_alone() -> None:
    nic = {"name": "nic", "exactly": {"deviceClassName": "nic.example.com", "count": 2}}
    decision, pod = decide(pod_request(by_template()), {(TEMPLATE, "gpus"): template(nic)})
    assert decision.outcome == "untouched", decision.response
    assert "schedulingGates" not in pod["spec"]


def test_a_mig_device_is_a_share_of_its_gpu() -> None:
    profile = 'device.attributes["gpu.nvidia.com"].profile == "3g.40gb"'
    decision, pod = decide(pod_request(by_template()), {
        (TEMPLATE, "gpus"): template(gpus(1, profile, cls=c.DRA_MIG_CLASS))})
    assert decision.outcome == "mutated", decision.response
    ann = pod["metadata"]["annotations"]
    assert ann[c.ANNOTATION_GPU_COUNT] == "1" and ann[c.ANNOTATION_GPU_MILLI] == "429"


@pytest.mark.parametrize(("extra", "words"), [
    ({"allocationMode": "All"}, "use ExactCount"),
    ({"adminAccess": True}, "tenants' pods may not ask for it"),
    ({"capacity": {"requests": {"cores": "10"}}}, "capacity Berth does not plan"),
    ({"capacity": {"requests": {"memory": "lots"}}}, "positive quantity of memory"),
    ({"capacity": {"requests": {"memory": "0"}}}, "positive quantity of memory"),
    ({"capacity": {"requests": {}}}, "must ask for the GPU's memory once"),
    ({"capacity": {"requests": {"memory": "200Gi"}}}, "more than a 81920 MiB GPU holds"),
    ({"capacity": "40Gi"}, "must be a mapping"),
])
def test_what_berth_cannot_plan_is_refused(extra: dict[str, Any], words: str) -> None:
    objects = {(TEMPLATE, "gpus"): template(gpus(1, **extra))}
    decision, _ = decide(pod_request(by_template()), objects)
    assert words in message(decision)


def test_mixing_claims_and_device_plugin_gpus_is_refused() -> None:
    decision, _ = decide(pod_request(by_template(), limits={c.RESOURCE_GPU: "1"}),
                         {(TEMPLATE, "gpus"): template(gpus(1))})
    assert "ask for them one way" in message(decision)


def test_a_fraction_annotation_on_a_claim_pod_is_refused() -> None:
    decision, _ = decide(pod_request(by_template(), annotations={c.ANNOTATION_FRACTION: "0.5"}),
                         {(TEMPLATE, "gpus"): template(gpus(1))})
    assert c.ANNOTATION_FRACTION in message(decision)


def test_constraints_on_gpu_requests_are_refused() -> None:
    spec = template(gpus(2), constraints=[{"requests": ["gpu"],
                                           "matchAttribute": "resource.kubernetes.io/pcieRoot"}])
    decision, _ = decide(pod_request(by_template()), {(TEMPLATE, "gpus"): spec})
    assert "constrains GPU requests" in message(decision)


@pytest.mark.parametrize("expression", [
    'device.attributes["gpu.nvidia.com"].productName == "A" || device.driver == "x"',
    'device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("40Gi")) >= 0',
    'device.attributes["gpu.nvidia.com"].productName != "A"',
    "true",
    "",
])
def test_selectors_berth_cannot_read_are_refused(expression: str) -> None:
    with pytest.raises(ClaimProblem, match="selector Berth cannot plan"):
        gpu_ask(template(gpus(1, expression))["spec"]["spec"], "t")


def test_selectors_berth_reads() -> None:
    spec = template(gpus(1, 'device.driver == "gpu.nvidia.com"',
                         f"({model_is('A', 'B')}) && {model_is('B')}"))["spec"]["spec"]
    ask = gpu_ask(spec, "t")
    assert ask.count == 1 and ask.models == {"B"}


def test_models_of_two_claims_intersect() -> None:
    pod = pod_request([{"name": "a", "resourceClaimTemplateName": "a"},
                       {"name": "b", "resourceClaimTemplateName": "b"}])["object"]
    ask = pod_ask(pod, {(TEMPLATE, "a"): template(gpus(1, model_is("A", "B"))),
                        (TEMPLATE, "b"): template(gpus(2, model_is("B", "C")))})
    assert ask is not None and ask.count == 3 and ask.models == {"B"}
    with pytest.raises(ClaimProblem, match="no other claim of the pod allows"):
        pod_ask(pod, {(TEMPLATE, "a"): template(gpus(1, model_is("A"))),
                      (TEMPLATE, "b"): template(gpus(2, model_is("C")))})


def _garbage(rng: random.Random, depth: int = 0) -> Any:
    kind = rng.randrange(7 if depth < 3 else 4)
    if kind == 0:
        return rng.randrange(-3, 10 ** 7)
    if kind == 1:
        return "".join(rng.choice(string.printable) for _ in range(rng.randrange(12)))
    if kind == 2:
        return None
    if kind == 3:
        return rng.choice([True, False, 1.5])
    if kind == 4:
        return [_garbage(rng, depth + 1) for _ in range(rng.randrange(4))]
    keys = ["devices", "requests", "exactly", "deviceClassName", "count", "selectors", "cel",
            "expression", "allocationMode", "firstAvailable", "constraints", "name", "spec"]
    return {rng.choice(keys): _garbage(rng, depth + 1) for _ in range(rng.randrange(5))}


def test_generated_hostile_templates_are_refused_or_read_never_crash() -> None:
    rng = random.Random(7)
    for i in range(3000):
        obj = {"spec": {"spec": _garbage(rng)}} if i % 2 else {"spec": _garbage(rng)}
        request = pod_request(by_template())
        # the generated spec sits where the template's spec goes, with GPU requests mixed in
        if i % 3 == 0 and isinstance(obj["spec"], dict):
            obj["spec"]["spec"] = {"devices": {"requests": [gpus(1), _garbage(rng)]}}
        decision = review(request, POLICY, {(TEMPLATE, "gpus"): obj})
        response = decision.response
        assert response["allowed"] or "Berth:" in response["status"]["message"]
        assert "Traceback" not in str(response)


def test_bounds_on_what_a_pod_or_template_may_bring() -> None:
    many = [{"name": f"c{i}", "resourceClaimTemplateName": "gpus"} for i in range(33)]
    decision, _ = decide(pod_request(many), {(TEMPLATE, "gpus"): template(gpus(1))})
    assert "Berth reads at most 32" in message(decision)
    long = model_is(A100) + " || " + " || ".join([model_is("X" * 40)] * 120)
    with pytest.raises(ClaimProblem, match="selectors of at most 4096"):
        gpu_ask(template(gpus(1, long))["spec"]["spec"], "t")
    for count in (True, 1.5, -1, 10 ** 9, "1"):
        with pytest.raises(ClaimProblem, match="whole number from 1"):
            gpu_ask(template(gpus(count))["spec"]["spec"], "t")  # type: ignore[arg-type]
    alternatives = {"name": "gpu", "firstAvailable": [
        {"name": "a", "deviceClassName": c.DRA_GPU_CLASS}]}
    with pytest.raises(ClaimProblem, match="lists alternatives"):
        gpu_ask(template(alternatives)["spec"]["spec"], "t")


def test_a_claim_pod_that_names_both_claim_and_template_in_one_entry_is_refused() -> None:
    both = [{"name": "gpu", "resourceClaimName": "a", "resourceClaimTemplateName": "b"}]
    decision, _ = decide(pod_request(both), {})
    assert "exactly one of resourceClaimName and resourceClaimTemplateName" in message(decision)


def test_forged_berth_keys_on_a_claim_pod_are_replaced() -> None:
    # the pod says it holds 0 GPUs through DRA and names a node: Berth writes its own values
    forged = {c.ANNOTATION_GPU_COUNT: "0", c.ANNOTATION_SHARING: "dra",
              c.ANNOTATION_ASSIGNED_NODE: "n0"}
    decision, pod = decide(pod_request(by_template(), annotations=forged),
                           {(TEMPLATE, "gpus"): template(gpus(2))})
    assert decision.outcome == "mutated"
    ann = pod["metadata"]["annotations"]
    assert ann[c.ANNOTATION_GPU_COUNT] == "2" and c.ANNOTATION_ASSIGNED_NODE not in ann


def test_a_webhook_without_api_access_refuses_claim_pods_saying_why(tmp_path: Any) -> None:
    import asyncio

    from admission.metrics import WebhookMetrics
    from admission.webhook.server import PolicySource, WebhookState, _claims_for

    policy = tmp_path / "policy.yaml"
    policy.write_text(SAMPLE.read_text())
    metrics = WebhookMetrics()
    state = WebhookState(PolicySource(policy, metrics), metrics)
    answer = asyncio.run(_claims_for(state, pod_request(by_template())))
    assert "runs without API access" in answer.response["status"]["message"]  # type: ignore[union-attr]
    # a pod out of Berth's namespaces, or naming no claim, costs no read at all
    assert asyncio.run(_claims_for(state, pod_request(by_template(), namespace="other"))) is None
    assert asyncio.run(_claims_for(state, pod_request([]))) is None


def share(memory: str, count: int = 1, **extra: Any) -> dict[str, Any]:
    return gpus(count, capacity={"requests": {"memory": memory}}, **extra)


def test_a_share_by_consumable_capacity_is_its_part_of_the_memory() -> None:
    decision, pod = decide(pod_request(by_template()),
                           {(TEMPLATE, "gpus"): template(share("40Gi"))})
    assert decision.outcome == "mutated", decision.response
    ann = pod["metadata"]["annotations"]
    assert ann[c.ANNOTATION_GPU_COUNT] == "1" and ann[c.ANNOTATION_GPU_MILLI] == "500"
    assert ann[c.ANNOTATION_GPU_MEMORY_MIB] == str(40 * 1024)
    assert ann[c.ANNOTATION_SHARING] == "dra"
    assert pod["spec"]["schedulingGates"] == [{"name": c.SCHEDULING_GATE}]
    assert "limits" not in pod["spec"]["containers"][0]["resources"]
    # 10Gi of an 80Gi GPU: 0.125, not rounded to the grid (the driver hands out memory)
    decision, pod = decide(pod_request(by_template()),
                           {(TEMPLATE, "gpus"): template(share("10Gi"))})
    assert pod["metadata"]["annotations"][c.ANNOTATION_GPU_MILLI] == "125"
    decision, pod = decide(pod_request(by_template()),
                           {(TEMPLATE, "gpus"): template(share("80Gi"))})
    assert pod["metadata"]["annotations"][c.ANNOTATION_GPU_MILLI] == "1000"


@pytest.mark.parametrize(("spec", "words"), [
    (template(share("40Gi", 2)), "count 1"),
    (template(gpus(1), share("40Gi")), "other GPUs in one claim"),
    (template(share("40Gi"), gpus(1)), "the claim's only GPU request"),
    (template(share("40Gi", cls=c.DRA_MIG_CLASS)), "a share of a MIG device"),
])
def test_a_share_by_capacity_is_one_device_alone(spec: dict[str, Any], words: str) -> None:
    decision, _ = decide(pod_request(by_template()), {(TEMPLATE, "gpus"): spec})
    assert words in message(decision)


def test_a_share_by_capacity_next_to_another_claims_gpus_is_refused() -> None:
    claims = [{"name": "a", "resourceClaimTemplateName": "a"},
              {"name": "b", "resourceClaimTemplateName": "b"}]
    for first, second in ((share("40Gi"), gpus(1)), (gpus(1), share("40Gi")),
                          (share("40Gi"), share("20Gi"))):
        decision, _ = decide(pod_request(claims), {(TEMPLATE, "a"): template(first),
                                                   (TEMPLATE, "b"): template(second)})
        assert "a pod takes whole GPUs or one share" in message(decision)


def test_a_share_by_capacity_without_model_memory_in_the_policy_is_refused() -> None:
    import re

    from admission.policy.load import check_text
    text = re.sub(r"(?ms)^gpuModels:.*?^\n", "", SAMPLE.read_text())
    bare, issues = check_text(text)
    assert bare is not None and not bare.gpu_models, issues
    decision = review(pod_request(by_template()), bare,
                      {(TEMPLATE, "gpus"): template(share("40Gi"))})
    text = message(decision)
    assert "capacity.requests.memory" in text and "declares no gpuModels" in text
