"""review() on real AdmissionReview payloads and on table cases built from them."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from review_helpers import SAMPLE, apply_patch, fixture, policy_from

from admission import constants as c
from admission.policy import load_policy
from admission.webhook import Decision, parse_review, review

POLICY = load_policy(SAMPLE)


def decide(payload: dict[str, Any], policy: Any = POLICY) -> tuple[Decision, dict[str, Any]]:
    _, request = parse_review(payload)
    decision = review(request, policy)
    pod = request["object"]
    if "patch" in decision.response:
        pod = apply_patch(pod, decision.response["patch"])
    return decision, pod


def env_of(pod: dict[str, Any], i: int = 0) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in pod["spec"]["containers"][i]
            .get("env", [])}


def test_job_pod_is_gated_and_labelled() -> None:
    decision, pod = decide(fixture("job-pod.json"))
    assert decision.outcome == "mutated" and decision.response["allowed"]
    labels, ann = pod["metadata"]["labels"], pod["metadata"]["annotations"]
    assert labels[c.LABEL_TENANT] == "team-a"
    assert labels[c.LABEL_GANG] == "job-llama-ft" and ann[c.ANNOTATION_GANG_SOURCE] == "job"
    assert ann[c.ANNOTATION_GPU_COUNT] == "8" and ann[c.ANNOTATION_GPU_MILLI] == "1000"
    assert c.ANNOTATION_GANG_SIZE not in ann  # a Job's parallelism is not on its pods
    assert pod["spec"]["schedulingGates"] == [{"name": c.SCHEDULING_GATE}]
    env = env_of(pod)
    assert env["NCCL_DEBUG"] == "WARN"  # the user's env is kept
    assert env[c.ENV_GPU_ASSIGNMENT] == {"fieldRef": {
        "fieldPath": f"metadata.annotations['{c.ANNOTATION_ASSIGNED_GPUS}']"}}
    # whole GPUs keep nvidia.com/gpu untouched
    assert pod["spec"]["containers"][0]["resources"]["limits"][c.RESOURCE_GPU] == "8"


def test_plain_pod_without_labels_gets_maps_created() -> None:
    decision, pod = decide(fixture("plain-gpu-pod.json"))
    assert decision.outcome == "mutated"
    assert pod["metadata"]["labels"][c.LABEL_GANG] == "pod-cuda-smoke"
    assert pod["metadata"]["annotations"][c.ANNOTATION_GANG_SIZE] == "1"
    assert pod["metadata"]["annotations"][c.ANNOTATION_ALLOWED_MODELS] == "NVIDIA-A100-SXM4-80GB"


def test_kueue_pod_group_keeps_its_name_and_size() -> None:
    _, pod = decide(fixture("kueue-pod.json"))
    ann = pod["metadata"]["annotations"]
    assert pod["metadata"]["labels"][c.LABEL_GANG] == "sweep"
    assert (ann[c.ANNOTATION_GANG_SOURCE], ann[c.ANNOTATION_GANG_SIZE]) == ("kueue", "4")
    assert pod["metadata"]["labels"][c.KUEUE_QUEUE_LABEL] == "team-a-queue"


def test_volcano_pod_group_from_annotation() -> None:
    _, pod = decide(fixture("volcano-pod.json"))
    ann = pod["metadata"]["annotations"]
    assert ann[c.ANNOTATION_GANG_SOURCE] == "volcano"
    assert ann[c.ANNOTATION_GANG_NAME] == "mpi-job"
    assert pod["spec"]["schedulerName"] == "volcano"


def test_kai_fraction_becomes_time_slicing_slots() -> None:
    _, pod = decide(fixture("kai-fraction-pod.json"))
    limits = pod["spec"]["containers"][0]["resources"]["limits"]
    assert limits["nvidia.com/gpu.shared"] == "2"  # 0.5 x 4 replicas
    assert c.RESOURCE_GPU not in limits
    ann = pod["metadata"]["annotations"]
    assert (ann[c.ANNOTATION_GPU_COUNT], ann[c.ANNOTATION_GPU_MILLI]) == ("1", "500")
    assert c.ENV_GPU_ASSIGNMENT in env_of(pod)


def test_non_gpu_pod_and_unmanaged_namespace_pass_untouched() -> None:
    payload = fixture("non-gpu-pod.json")
    decision, _ = decide(payload)
    assert decision.response == {"uid": payload["request"]["uid"], "allowed": True}
    payload = fixture("job-pod.json")
    payload["request"]["namespace"] = "kube-system"
    payload["request"]["object"]["metadata"]["namespace"] = "kube-system"
    decision, _ = decide(payload)
    assert (decision.outcome, decision.reason) == ("untouched", "unmanaged-namespace")
    assert "patch" not in decision.response


@pytest.mark.parametrize("operation", ["UPDATE", "DELETE", "CONNECT"])
def test_only_create_is_mutated(operation: str) -> None:
    payload = fixture("job-pod.json")
    payload["request"]["operation"] = operation
    decision, _ = decide(payload)
    assert decision.outcome == "untouched" and decision.reason == "not-create"


def test_other_kinds_and_subresources_pass() -> None:
    payload = fixture("job-pod.json")
    payload["request"]["kind"] = {"group": "batch", "version": "v1", "kind": "Job"}
    assert decide(payload)[0].reason == "not-a-pod"
    payload = fixture("job-pod.json")
    payload["request"]["subResource"] = "ephemeralcontainers"
    assert decide(payload)[0].reason == "not-a-pod"


def _with(payload: dict[str, Any], *, labels: dict[str, str] | None = None,
          annotations: dict[str, str] | None = None) -> dict[str, Any]:
    payload = copy.deepcopy(payload)
    meta = payload["request"]["object"]["metadata"]
    meta.setdefault("labels", {}).update(labels or {})
    meta.setdefault("annotations", {}).update(annotations or {})
    return payload


REFUSALS = [
    ("spoofed tenant label", {"labels": {c.LABEL_TENANT: "team-a"}},
     "metadata.labels[berth.dev/tenant]: claims tenant 'team-a' but the namespace belongs to "
     "tenant 'team-b'; remove it or set it to 'team-b'", "tenant-mismatch"),
    ("off-grid fraction", {"annotations": {c.ANNOTATION_FRACTION: "0.3"}},
     "0.3 is not on this cluster's fraction grid; use one of 0.25, 0.5, 0.75, 1",
     "fraction-off-grid"),
    ("fraction above one", {"annotations": {c.KAI_FRACTION: "1.5"}},
     "metadata.annotations[gpu-fraction]: must be in (0, 1]", "bad-fraction"),
    ("fraction not a number", {"annotations": {c.ANNOTATION_FRACTION: "half"}},
     "must be a number in (0, 1], got 'half'", "bad-fraction"),
    ("model not allowed", {"annotations": {c.ANNOTATION_GPU_MODELS: "Tesla-T4"}},
     "GPU model Tesla-T4 is not allowed for tenant 'team-b'; use one of: NVIDIA-A100-SXM4-80GB",
     "model-not-allowed"),
    ("unknown QoS class", {"annotations": {c.ANNOTATION_QOS_CLASS: "gold"}},
     "unknown QoS class 'gold'", "bad-qos-class"),
    ("bad topology", {"annotations": {c.ANNOTATION_TOPOLOGY: "required:galaxy"}},
     "must be <level> or required:<level>", "bad-topology"),
    ("gang too big", {"annotations": {c.ANNOTATION_GANG: "g", c.ANNOTATION_GANG_SIZE: "17"}},
     "a gang of 17 pods exceeds tenant 'team-b''s limit of 16", "over-limit"),
    ("gang beyond quota", {"annotations": {c.ANNOTATION_GANG: "g", c.ANNOTATION_GANG_SIZE: "9"}},
     "1 GPUs x 9 pods can never be admitted: tenant 'team-b' holds at most 8 GPUs",
     "over-quota"),
    ("sizes disagree", {"labels": {c.KUEUE_POD_GROUP_LABEL: "pg"},
                        "annotations": {c.KUEUE_POD_GROUP_COUNT: "3", c.ANNOTATION_GANG_SIZE: "4"}},
     "says 4 pods but kueue.x-k8s.io/pod-group-total-count says 3", "gang-size"),
    ("bad gang size", {"annotations": {c.ANNOTATION_GANG: "g", c.ANNOTATION_GANG_SIZE: "0"}},
     "berth.dev/gang-size]: must be >= 1", "gang-size"),
]


@pytest.mark.parametrize(("case", "meta", "needle", "reason"), REFUSALS,
                         ids=[r[0] for r in REFUSALS])
def test_refusals_name_the_field_and_the_fix(case: str, meta: dict[str, dict[str, str]],
                                             needle: str, reason: str) -> None:
    decision, _ = decide(_with(fixture("plain-gpu-pod.json"), **meta))
    assert decision.response["allowed"] is False, case
    message = decision.response["status"]["message"]
    assert needle in message, message
    assert decision.reason == reason
    assert decision.response["status"]["code"] == 403


def test_every_problem_is_reported_at_once() -> None:
    payload = _with(fixture("plain-gpu-pod.json"),
                    labels={c.LABEL_TENANT: "team-a"},
                    annotations={c.ANNOTATION_QOS_CLASS: "gold", c.ANNOTATION_PRIORITY: "high"})
    payload["request"]["object"]["spec"]["nodeName"] = "gpu-node-1"
    message = decide(payload)[0].response["status"]["message"]
    for field in ("berth.dev/tenant", "spec.nodeName", "berth.dev/qos-class",
                  "berth.dev/priority"):
        assert field in message


def test_too_many_gpus_per_pod() -> None:
    payload = fixture("plain-gpu-pod.json")
    res = payload["request"]["object"]["spec"]["containers"][0]["resources"]
    res["limits"][c.RESOURCE_GPU] = res["requests"][c.RESOURCE_GPU] = "5"
    message = decide(payload)[0].response["status"]["message"]
    assert "5 GPUs exceed tenant 'team-b''s limit of 4 per pod" in message


def test_fractional_gpu_resource_is_refused_with_the_annotation_to_use() -> None:
    payload = fixture("plain-gpu-pod.json")
    payload["request"]["object"]["spec"]["containers"][0]["resources"]["limits"][
        c.RESOURCE_GPU] = "500m"
    message = decide(payload)[0].response["status"]["message"]
    assert "must be a whole number of GPUs" in message and c.ANNOTATION_FRACTION in message


def test_tenant_overwrite_policy_replaces_the_label_with_a_warning() -> None:
    policy = policy_from("""\
        tenants: [{name: team-a, namespaces: [team-a]}, {name: team-b, namespaces: [team-b]}]
        admission: {tenantMismatch: overwrite}
        """)
    payload = _with(fixture("plain-gpu-pod.json"), labels={c.LABEL_TENANT: "team-a"})
    decision, pod = decide(payload, policy)
    assert decision.response["allowed"]
    assert pod["metadata"]["labels"][c.LABEL_TENANT] == "team-b"
    assert "replaced by 'team-b'" in decision.response["warnings"][0]


def test_assignment_annotations_brought_by_the_pod_are_stripped() -> None:
    payload = _with(fixture("plain-gpu-pod.json"),
                    annotations={c.ANNOTATION_ASSIGNED_GPUS: "0,1,2,3"})
    decision, pod = decide(payload)
    assert c.ANNOTATION_ASSIGNED_GPUS not in pod["metadata"]["annotations"]
    assert decision.response["warnings"]


def test_existing_gate_is_not_added_twice_and_other_gates_stay() -> None:
    payload = fixture("plain-gpu-pod.json")
    payload["request"]["object"]["spec"]["schedulingGates"] = [
        {"name": c.KUEUE_GATE}, {"name": c.SCHEDULING_GATE}]
    _, pod = decide(payload)
    assert pod["spec"]["schedulingGates"] == [{"name": c.KUEUE_GATE}, {"name": c.SCHEDULING_GATE}]


def test_generated_name_gets_a_gang_from_the_review_uid() -> None:
    payload = fixture("plain-gpu-pod.json")
    payload["request"]["name"] = ""
    del payload["request"]["object"]["metadata"]["name"]
    payload["request"]["object"]["metadata"]["generateName"] = "smoke-"
    _, pod = decide(payload)
    assert pod["metadata"]["labels"][c.LABEL_GANG] == (
        "pod-" + payload["request"]["uid"])


def test_long_gang_names_become_valid_label_values() -> None:
    name = "x" * 80 + "/weird name"
    _, pod = decide(_with(fixture("plain-gpu-pod.json"), annotations={c.ANNOTATION_GANG: name}))
    label = pod["metadata"]["labels"][c.LABEL_GANG]
    assert len(label) <= 63 and label.replace("-", "").isalnum()
    assert pod["metadata"]["annotations"][c.ANNOTATION_GANG_NAME] == name


SHARING = {
    "mps": ("backend: mps", {"nvidia.com/gpu.shared": "1"}, {
        "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "50", "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "0=20480M"}),
    "mig": ("backend: mig", {"nvidia.com/mig-4g.40gb": "1"}, {}),
    "hami": ("backend: hami", {c.RESOURCE_GPU: "1", c.HAMI_GPU_CORES: "50",
                               c.HAMI_GPU_MEM: "20480"}, {}),
}


@pytest.mark.parametrize("backend", sorted(SHARING))
def test_sharing_adapters_translate_a_half_gpu(backend: str) -> None:
    setting, resources, env = SHARING[backend]
    policy = policy_from(f"""\
        tenants: [{{name: team-a, namespaces: [team-a]}}]
        gpuModels: [{{name: A100, memoryMiB: 81920}}]
        sharing: {{{setting}, fractionGrid: [0.25, 0.5, 1.0]}}
        """)
    payload = _with(fixture("kai-fraction-pod.json"), annotations={c.KAI_MEMORY: "20Gi"})
    decision, pod = decide(payload, policy)
    assert decision.outcome == "mutated", decision.response
    limits = pod["spec"]["containers"][0]["resources"]["limits"]
    for key, value in resources.items():
        assert limits[key] == value
    got_env = env_of(pod)
    for key, value in env.items():
        assert got_env[key] == value
    assert pod["metadata"]["annotations"][c.ANNOTATION_GPU_MEMORY_MIB] == "20480"


def test_mig_pod_holds_its_profile_share() -> None:
    policy = policy_from("""\
        tenants: [{name: team-a, namespaces: [team-a]}]
        sharing: {backend: mig, fractionGrid: [0.125, 0.25, 0.5, 1.0]}
        """)
    payload = _with(fixture("kai-fraction-pod.json"), annotations={c.KAI_FRACTION: "0.125"})
    _, pod = decide(payload, policy)
    assert pod["spec"]["containers"][0]["resources"]["limits"] == {
        "cpu": "8", "memory": "64Gi", "nvidia.com/mig-1g.10gb": "1"}
    assert pod["metadata"]["annotations"][c.ANNOTATION_GPU_MILLI] == "143"  # 1/7 of the GPU


def test_no_sharing_refuses_fractions() -> None:
    policy = policy_from("tenants: [{name: team-a, namespaces: [team-a]}]\n")
    decision, _ = decide(fixture("kai-fraction-pod.json"), policy)
    assert "does not share GPUs" in decision.response["status"]["message"]


def test_gpu_memory_alone_is_rounded_up_to_the_grid() -> None:
    payload = fixture("kai-fraction-pod.json")
    ann = payload["request"]["object"]["metadata"]["annotations"]
    del ann[c.KAI_FRACTION]
    ann[c.ANNOTATION_GPU_MEMORY] = "30000"  # 0.37 of 80 GiB -> 0.5 on the sample's grid
    _, pod = decide(payload)
    assert pod["metadata"]["annotations"][c.ANNOTATION_GPU_MILLI] == "500"
    assert pod["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu.shared"] == "2"


def test_malformed_pods_in_scope_are_refused_not_crashed() -> None:
    payload = fixture("plain-gpu-pod.json")
    payload["request"]["object"]["spec"]["containers"][0]["resources"] = "lots"
    message = decide(payload)[0].response["status"]["message"]
    assert message.startswith("Berth: spec.containers[0].resources: must be a mapping")


def test_several_gpu_containers_add_up_and_each_gets_the_env() -> None:
    payload = fixture("plain-gpu-pod.json")
    spec = payload["request"]["object"]["spec"]
    second = copy.deepcopy(spec["containers"][0])
    second["name"] = "sidecar"
    second["resources"] = {"limits": {c.RESOURCE_GPU: "2"}}
    spec["containers"].append(second)
    spec["initContainers"] = [{"name": "warmup", "image": "busybox",
                               "resources": {"limits": {c.RESOURCE_GPU: "4"}}}]
    _, pod = decide(payload)
    # 1 + 2 in the main containers, 4 in the init container that runs alone first: 4
    assert pod["metadata"]["annotations"][c.ANNOTATION_GPU_COUNT] == "4"
    assert c.ENV_GPU_ASSIGNMENT in env_of(pod, 0) and c.ENV_GPU_ASSIGNMENT in env_of(pod, 1)


def test_time_slicing_without_a_renamed_resource_counts_whole_gpus_in_slots() -> None:
    policy = policy_from("""\
        tenants: [{name: team-b, namespaces: [team-b]}]
        sharing: {backend: time-slicing, timeSlicing: {resourceName: nvidia.com/gpu,
                  replicas: 4}}
        """)
    payload = fixture("plain-gpu-pod.json")
    res = payload["request"]["object"]["spec"]["containers"][0]["resources"]
    res["limits"][c.RESOURCE_GPU] = res["requests"][c.RESOURCE_GPU] = "2"
    _, pod = decide(payload, policy)
    res = pod["spec"]["containers"][0]["resources"]
    assert res["limits"][c.RESOURCE_GPU] == res["requests"][c.RESOURCE_GPU] == "8"
    assert pod["metadata"]["annotations"][c.ANNOTATION_GPU_COUNT] == "2"


def test_mps_share_without_memory_sets_only_the_thread_percentage() -> None:
    policy = policy_from("""\
        tenants: [{name: team-a, namespaces: [team-a]}]
        sharing: {backend: mps, fractionGrid: [0.25, 0.5, 1.0]}
        """)
    _, pod = decide(fixture("kai-fraction-pod.json"), policy)
    env = env_of(pod)
    assert env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "50"
    assert "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT" not in env
