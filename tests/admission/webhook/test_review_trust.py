"""Nothing a pod writes is trusted: Berth's own keys and gate, priority, QoS, where the GPU
demand sits (init and sidecar containers, the sharing backend's own resources) and how numbers
are written. Each case is an attack a user with pod create rights in one namespace can make."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from review_helpers import fixture, policy_from
from test_review import POLICY, decide
from test_review_hostile import owned_annotation, owned_label

from admission import constants as c
from admission.webhook import parse_review, review

OWNED_LABELS = {c.LABEL_MANAGED: "true", c.LABEL_TENANT: "team-b", c.LABEL_GANG: "vip",
                c.LABEL_QOS_CLASS: "training", "berth.dev/webhook": "skip"}
OWNED_ANNOTATIONS = {
    c.ANNOTATION_TENANT: "team-b", c.ANNOTATION_GANG_NAME: "vip", c.ANNOTATION_GANG_SOURCE: "x",
    c.ANNOTATION_GPU_COUNT: "0", c.ANNOTATION_GPU_MILLI: "1", c.ANNOTATION_GPU_MEMORY_MIB: "1",
    c.ANNOTATION_ALLOWED_MODELS: "any", c.ANNOTATION_SHARING: "none", c.ANNOTATION_QUEUE: "vip",
    c.ANNOTATION_POLICY_GENERATION: "old", c.ANNOTATION_ASSIGNED_NODE: "gpu-node-1",
    c.ANNOTATION_ASSIGNED_GPUS: "0,1", c.ANNOTATION_ASSIGNED_GPU_MILLI: "1000,1000",
    c.ANNOTATION_ASSIGNED_AT: "2026-01-01T00:00:00Z", c.ANNOTATION_PLAN: "p-1",
    "berth.dev/gang-timed-out": "no",
    # what the release shows of a pod's run time: a pod may not bring its own
    c.ANNOTATION_EXPECTED_END: "2026-01-01T00:00:00Z", c.ANNOTATION_RUNTIME_SOURCE: "pod-deadline",
}


def _forged(name: str, namespace: str | None = None) -> dict[str, Any]:
    payload = fixture(name)
    request = payload["request"]
    meta = request["object"]["metadata"]
    meta.setdefault("labels", {}).update(OWNED_LABELS)
    meta.setdefault("annotations", {}).update(OWNED_ANNOTATIONS)
    meta["annotations"][c.ANNOTATION_PRIORITY] = "5"  # user input: stays
    request["object"]["spec"]["schedulingGates"] = [{"name": "other.io/gate"},
                                                    {"name": c.SCHEDULING_GATE}]
    if namespace is not None:
        request["namespace"] = meta["namespace"] = namespace
    return payload


def _owned(pod: dict[str, Any]) -> dict[str, str]:
    meta = pod["metadata"]
    return ({f"label {k}": v for k, v in (meta.get("labels") or {}).items()
             if owned_label(k)}
            | {f"annotation {k}": v for k, v in (meta.get("annotations") or {}).items()
               if owned_annotation(k)})


def _gates(pod: dict[str, Any]) -> list[str]:
    return [g["name"] for g in pod["spec"].get("schedulingGates") or []]


@pytest.mark.parametrize(("case", "name", "namespace"), [
    ("non-GPU pod in a managed namespace", "non-gpu-pod.json", None),
    ("GPU pod in an unmanaged namespace", "plain-gpu-pod.json", "kube-system"),
])
def test_a_pod_out_of_scope_loses_berths_keys_and_gate(case: str, name: str,
                                                       namespace: str | None) -> None:
    decision, pod = decide(_forged(name, namespace))
    assert decision.response["allowed"] and decision.reason == "berth-keys-removed", case
    assert _owned(pod) == {}
    assert _gates(pod) == ["other.io/gate"]
    assert pod["metadata"]["annotations"][c.ANNOTATION_PRIORITY] == "5"
    assert pod["metadata"]["labels"]["app"] == "web" if "non-gpu" in name else True
    (warning,) = decision.response["warnings"]  # one, cut short: 22 keys and the gate
    removed = len(OWNED_LABELS) + len(OWNED_ANNOTATIONS) + 1
    assert "metadata.labels[berth.dev/tenant]" in warning
    assert f"and {removed - 6} more: only Berth sets them" in warning


def test_the_warning_names_what_was_removed() -> None:
    payload = fixture("non-gpu-pod.json")
    payload["request"]["object"]["metadata"]["annotations"] = {c.ANNOTATION_ASSIGNED_NODE: "n"}
    payload["request"]["object"]["spec"]["schedulingGates"] = [{"name": c.SCHEDULING_GATE}]
    decision, pod = decide(payload)
    assert decision.response["warnings"] == [
        f"Berth removed metadata.annotations[{c.ANNOTATION_ASSIGNED_NODE}], "
        f"spec.schedulingGates[{c.SCHEDULING_GATE}]: only Berth sets them"]
    assert pod["metadata"]["annotations"] == {} and pod["spec"]["schedulingGates"] == []


def test_a_clean_pod_out_of_scope_is_untouched() -> None:
    payload = fixture("non-gpu-pod.json")
    decision, _ = decide(payload)
    assert decision.response == {"uid": payload["request"]["uid"], "allowed": True}


def test_a_pod_in_scope_gets_berths_values_in_place_of_forged_ones() -> None:
    payload = _forged("plain-gpu-pod.json")
    del payload["request"]["object"]["metadata"]["labels"][c.LABEL_QOS_CLASS]  # input, below
    decision, pod = decide(payload)
    clean, clean_pod = decide(fixture("plain-gpu-pod.json"))
    assert decision.reason == clean.reason == "admitted"
    assert _owned(pod) == _owned(clean_pod)  # exactly what Berth writes on the clean pod
    assert _gates(pod) == ["other.io/gate", c.SCHEDULING_GATE]
    assert "metadata.annotations[berth.dev/assigned-node]" in decision.response["warnings"][0]


def test_forged_tenant_in_scope_is_still_refused() -> None:
    payload = _forged("plain-gpu-pod.json")
    payload["request"]["object"]["metadata"]["labels"][c.LABEL_TENANT] = "team-a"
    message = decide(payload)[0].response["status"]["message"]
    assert "claims tenant 'team-a'" in message


def test_the_pod_cannot_preset_its_gpu_assignment_or_lift_its_mps_limit() -> None:
    policy = policy_from("""\
        tenants: [{name: team-a, namespaces: [team-a]}]
        sharing: {backend: mps, fractionGrid: [0.25, 0.5, 1.0]}
        """)
    payload = fixture("kai-fraction-pod.json")
    payload["request"]["object"]["spec"]["containers"][0]["env"] = [
        {"name": c.ENV_GPU_ASSIGNMENT, "value": "0,1,2,3"},
        {"name": "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", "value": "100"},
        {"name": "KEEP", "value": "me"}]
    decision, pod = decide(payload, policy)
    env = pod["spec"]["containers"][0]["env"]
    by_name = {e["name"]: e for e in env}
    assert len(env) == len(by_name)  # each name once
    assert by_name["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"]["value"] == "50"
    assert "fieldRef" in by_name[c.ENV_GPU_ASSIGNMENT]["valueFrom"]
    assert by_name["KEEP"]["value"] == "me"
    assert any("replaced" in w for w in decision.response["warnings"])


# --------------------------------------------------------------------------------------------
# Priority
# --------------------------------------------------------------------------------------------

BOUNDED = """\
    tenants:
      - {name: team-a, namespaces: [team-a], limits: {maxPriority: 50}, priority: 10}
      - {name: team-b, namespaces: [team-b]}
    """


def _with_annotation(name: str, key: str, value: str) -> dict[str, Any]:
    payload = fixture(name)
    payload["request"]["object"]["metadata"].setdefault("annotations", {})[key] = value
    return payload


@pytest.mark.parametrize(("value", "allowed"), [
    ("100", True), ("-100", True), ("0", True), ("101", False), ("1000", False),
    ("1" + "0" * 30, False), ("²", False), ("١٠", False), ("1_0", False), (" 5", False),
    ("+5", False), ("5.0", False), ("", False), ("9" * 5000, False),
])
def test_priority_is_a_bounded_integer(value: str, allowed: bool) -> None:
    decision, _ = decide(_with_annotation("plain-gpu-pod.json", c.ANNOTATION_PRIORITY, value))
    assert decision.response["allowed"] is allowed, decision.response
    if not allowed:
        message = decision.response["status"]["message"]
        assert message.startswith(f"Berth: metadata.annotations[{c.ANNOTATION_PRIORITY}]: ")
        assert "from -100 to 100" in message and "admission.maxPriority" in message
        assert len(message) < 400  # the value is quoted cut short


def test_priority_bound_per_tenant() -> None:
    payload = _with_annotation("plain-gpu-pod.json", c.ANNOTATION_PRIORITY, "51")
    payload["request"]["namespace"] = "team-a"
    message = decide(payload, policy_from(BOUNDED))[0].response["status"]["message"]
    assert "from -50 to 50" in message and "limits.maxPriority" in message
    payload = _with_annotation("plain-gpu-pod.json", c.ANNOTATION_PRIORITY, "50")
    payload["request"]["namespace"] = "team-a"
    assert decide(payload, policy_from(BOUNDED))[0].response["allowed"]


@pytest.mark.parametrize(("value", "written"), [
    (2_000_000_000, "100"), (-5000, "-100"), (100, None), (0, None)])
def test_a_priority_class_beyond_the_bound_is_weighed_at_the_bound(
        value: int, written: str | None) -> None:
    payload = fixture("plain-gpu-pod.json")
    payload["request"]["object"]["spec"]["priority"] = value  # set from the PriorityClass
    decision, pod = decide(payload)
    assert decision.reason == "admitted", decision.response
    assert pod["metadata"]["annotations"].get(c.ANNOTATION_PRIORITY) == written
    if written is not None:
        assert any("spec.priority" in w for w in decision.response["warnings"])


# --------------------------------------------------------------------------------------------
# QoS class: the label the controller reads is checked like the annotation
# --------------------------------------------------------------------------------------------


def _team_a(payload: dict[str, Any]) -> dict[str, Any]:
    payload["request"]["namespace"] = "team-a"
    payload["request"]["object"]["metadata"]["namespace"] = "team-a"
    return payload


def _qos(label: str | None, annotation: str | None) -> tuple[Any, dict[str, Any]]:
    payload = _team_a(fixture("plain-gpu-pod.json"))
    meta = payload["request"]["object"]["metadata"]
    if label is not None:
        meta.setdefault("labels", {})[c.LABEL_QOS_CLASS] = label
    if annotation is not None:
        meta.setdefault("annotations", {})[c.ANNOTATION_QOS_CLASS] = annotation
    return decide(payload)


def test_a_qos_label_the_tenant_may_not_use_is_refused() -> None:
    decision, _ = _qos("notebook", None)  # team-a may use training and inference
    message = decision.response["status"]["message"]
    assert message.startswith(f"Berth: metadata.labels[{c.LABEL_QOS_CLASS}]: QoS class "
                              "'notebook' is not allowed for tenant 'team-a'"), message


def test_qos_label_and_annotation_must_agree() -> None:
    message = _qos("inference", "training")[0].response["status"]["message"]
    assert f"metadata.labels[{c.LABEL_QOS_CLASS}]: says 'inference'" in message


@pytest.mark.parametrize(("label", "annotation", "written"), [
    ("inference", None, "inference"), (None, "inference", "inference"),
    ("inference", "inference", "inference"), (None, None, "training"),
])
def test_the_validated_class_is_written_to_the_label(label: str | None,
                                                     annotation: str | None,
                                                     written: str) -> None:
    decision, pod = _qos(label, annotation)
    assert decision.response["allowed"], decision.response
    assert pod["metadata"]["labels"][c.LABEL_QOS_CLASS] == written


# --------------------------------------------------------------------------------------------
# GPU demand from every container, and in the backend's own resources
# --------------------------------------------------------------------------------------------


def _containers(mains: list[dict[str, str]], inits: list[tuple[dict[str, str], bool]]
                ) -> dict[str, Any]:
    payload = fixture("plain-gpu-pod.json")
    spec = payload["request"]["object"]["spec"]
    template = spec["containers"][0]
    spec["containers"] = []
    for i, limits in enumerate(mains):
        ct = copy.deepcopy(template)
        ct["name"] = f"main-{i}"
        ct["resources"] = {"limits": {"cpu": "1", **limits}}
        spec["containers"].append(ct)
    spec["initContainers"] = []
    for i, (limits, sidecar) in enumerate(inits):
        ct = {"name": f"init-{i}", "image": "busybox", "resources": {"limits": dict(limits)}}
        if sidecar:
            ct["restartPolicy"] = "Always"
        spec["initContainers"].append(ct)
    return payload


GPU = c.RESOURCE_GPU


def test_an_init_only_gpu_pod_is_gated_with_its_init_gpus_and_nothing_added_to_main() -> None:
    decision, pod = decide(_containers([{}], [({GPU: "2"}, False)]))
    assert decision.reason == "admitted", decision.response
    assert pod["metadata"]["annotations"][c.ANNOTATION_GPU_COUNT] == "2"
    assert GPU not in pod["spec"]["containers"][0]["resources"]["limits"]
    assert pod["spec"]["initContainers"][0]["resources"]["limits"][GPU] == "2"
    assert c.SCHEDULING_GATE in _gates(pod)
    assert c.ENV_GPU_ASSIGNMENT in {e["name"] for e in pod["spec"]["initContainers"][0]["env"]}
    assert "env" not in pod["spec"]["containers"][0]


@pytest.mark.parametrize(("mains", "inits", "count"), [
    ([{GPU: "1"}], [({GPU: "3"}, False)], 3),  # init alone beats the app
    ([{GPU: "1"}], [({GPU: "1"}, True)], 2),  # a sidecar runs beside the app
    ([{GPU: "1"}], [({GPU: "1"}, True), ({GPU: "2"}, False)], 3),  # init beside the sidecar
    ([{GPU: "2"}, {GPU: "1"}], [({GPU: "1"}, False)], 3),
    ([{}], [({GPU: "1"}, True), ({GPU: "1"}, True)], 2),
])
def test_effective_gpu_request_follows_kubernetes(mains: list[dict[str, str]],
                                                  inits: list[tuple[dict[str, str], bool]],
                                                  count: int) -> None:
    decision, pod = decide(_containers(mains, inits))
    assert decision.reason == "admitted", decision.response
    assert pod["metadata"]["annotations"][c.ANNOTATION_GPU_COUNT] == str(count)


def test_a_share_goes_to_each_container_that_asked_and_only_those() -> None:
    payload = _containers([{GPU: "1"}, {}], [({GPU: "1"}, False)])
    payload["request"]["object"]["metadata"]["annotations"] = {c.ANNOTATION_FRACTION: "0.5"}
    decision, pod = decide(payload)
    assert decision.reason == "admitted", decision.response
    spec = pod["spec"]
    for ct in (spec["containers"][0], spec["initContainers"][0]):
        assert ct["resources"]["limits"] == {"cpu": "1", "nvidia.com/gpu.shared": "2"} or (
            ct["resources"]["limits"] == {"nvidia.com/gpu.shared": "2"})
    assert spec["containers"][1]["resources"]["limits"] == {"cpu": "1"}


POLICIES = {
    "time-slicing": POLICY,  # the sample's: 4 slots of nvidia.com/gpu.shared per GPU
    "mig": policy_from("""\
        tenants: [{name: team-b, namespaces: [team-b]}]
        sharing: {backend: mig, fractionGrid: [0.125, 0.25, 0.5, 1.0]}
        """),
    "mps": policy_from("""\
        tenants: [{name: team-b, namespaces: [team-b]}]
        sharing: {backend: mps, fractionGrid: [0.25, 0.5, 1.0]}
        """),
    "hami": policy_from("""\
        tenants: [{name: team-b, namespaces: [team-b]}]
        gpuModels: [{name: A100, memoryMiB: 81920}]
        sharing: {backend: hami, fractionGrid: [0.25, 0.5, 1.0]}
        """),
    "none": policy_from("tenants: [{name: team-b, namespaces: [team-b]}]\n"),
}


def _direct(limits: dict[str, str]) -> dict[str, Any]:
    payload = fixture("plain-gpu-pod.json")
    payload["request"]["object"]["spec"]["containers"][0]["resources"] = {
        "limits": {"cpu": "8", **limits}, "requests": {"cpu": "8", **limits}}
    return payload


@pytest.mark.parametrize(("backend", "limits", "milli"), [
    ("time-slicing", {"nvidia.com/gpu.shared": "2"}, "500"),
    ("time-slicing", {"nvidia.com/gpu.shared": "1"}, "250"),
    ("mig", {"nvidia.com/mig-1g.10gb": "1"}, "143"),
    ("mig", {"nvidia.com/mig-3g.40gb": "1"}, "429"),
    ("hami", {GPU: "1", c.HAMI_GPU_CORES: "50", c.HAMI_GPU_MEM: "20480"}, "500"),
])
def test_the_backends_own_resources_are_read_back_into_a_share(
        backend: str, limits: dict[str, str], milli: str) -> None:
    decision, pod = decide(_direct(limits), POLICIES[backend])
    assert decision.reason == "admitted", decision.response
    ann = pod["metadata"]["annotations"]
    assert (ann[c.ANNOTATION_GPU_COUNT], ann[c.ANNOTATION_GPU_MILLI]) == ("1", milli)
    # kept exactly as the pod wrote them
    assert pod["spec"]["containers"][0]["resources"]["limits"] == {"cpu": "8", **limits}
    if backend == "hami":
        assert ann[c.ANNOTATION_GPU_MEMORY_MIB] == "20480"


@pytest.mark.parametrize(("backend", "limits", "needle"), [
    ("time-slicing", {"nvidia.com/gpu.shared": "4"}, "ask for 1 to 3 slots"),
    ("time-slicing", {"nvidia.com/gpu.shared": "1", GPU: "1"}, "in one container"),
    ("time-slicing", {"nvidia.com/mig-1g.10gb": "1"}, "is not a GPU resource this cluster"),
    ("time-slicing", {"nvidia.com/gpumem": "1024"}, "the sharing backend's nvidia.com/gpu.shared"),
    ("mig", {"nvidia.com/mig-1g.5gb": "1"}, "nvidia.com/mig-1g.10gb"),  # not a policy profile
    ("mig", {"nvidia.com/mig-1g.10gb": "2"}, "set nvidia.com/mig-1g.10gb to 1"),
    ("mps", {"nvidia.com/gpu.shared": "1"}, f"annotation {c.ANNOTATION_FRACTION}"),
    ("none", {"nvidia.com/gpu.shared": "1"}, "ask for whole GPUs with nvidia.com/gpu"),
    ("hami", {c.HAMI_GPU_CORES: "30", GPU: "1"}, "not on this cluster's fraction grid"),
    ("hami", {c.HAMI_GPU_CORES: "50", GPU: "2"}, "set nvidia.com/gpu to 1"),
    ("hami", {c.HAMI_GPU_MEM: "20480", GPU: "1"}, "set nvidia.com/gpucores"),
])
def test_other_gpu_resources_are_refused_with_the_key_to_use(
        backend: str, limits: dict[str, str], needle: str) -> None:
    decision, _ = decide(_direct(limits), POLICIES[backend])
    assert decision.response["allowed"] is False
    message = decision.response["status"]["message"]
    assert message.startswith("Berth: spec.containers[0].resources."), message
    assert needle in message, message


def test_a_direct_share_and_an_annotation_are_one_too_many() -> None:
    payload = _direct({"nvidia.com/gpu.shared": "2"})
    payload["request"]["object"]["metadata"]["annotations"] = {c.ANNOTATION_FRACTION: "0.5"}
    message = decide(payload)[0].response["status"]["message"]
    assert "keep one" in message


def test_network_devices_under_nvidia_com_are_not_gpus() -> None:
    decision, pod = decide(_direct({GPU: "1", "nvidia.com/hostdev": "1"}))
    assert decision.reason == "admitted", decision.response
    assert pod["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/hostdev"] == "1"


# --------------------------------------------------------------------------------------------
# Numbers are parsed strictly
# --------------------------------------------------------------------------------------------

HOSTILE_NUMBERS = ["²", "١", "፩", "1_0", " 1", "1 ", "+1", "1.0", "1e1", "0x1", "9" * 7,
                   "9" * 5000, "", "1k", "-1"]


@pytest.mark.parametrize("value", HOSTILE_NUMBERS)
def test_gpu_counts_are_ascii_digits(value: str) -> None:
    decision, _ = decide(_direct({GPU: value}))
    assert decision.response["allowed"] is False
    message = decision.response["status"]["message"]
    assert message.startswith("Berth: spec.containers[0].resources.limits[nvidia.com/gpu]: "
                              "must be a whole number of GPUs"), message


@pytest.mark.parametrize("key", [c.ANNOTATION_GANG_SIZE, c.KUEUE_POD_GROUP_COUNT,
                                 c.ANNOTATION_GPU_MEMORY, c.ANNOTATION_FRACTION])
@pytest.mark.parametrize("value", HOSTILE_NUMBERS)
def test_annotated_numbers_are_ascii_digits(key: str, value: str) -> None:
    if key == c.ANNOTATION_FRACTION and value == "1.0":
        return  # a whole GPU, written as a fraction: valid
    payload = fixture("kueue-pod.json") if key == c.KUEUE_POD_GROUP_COUNT else fixture(
        "plain-gpu-pod.json")
    ann = payload["request"]["object"]["metadata"].setdefault("annotations", {})
    ann[key] = value
    if key == c.ANNOTATION_GANG_SIZE:
        ann[c.ANNOTATION_GANG] = "g"
    decision, _ = decide(payload)
    assert decision.response["allowed"] is False, (key, value)
    assert decision.response["status"]["message"].startswith(
        f"Berth: metadata.annotations[{key}]: "), decision.response


def _nested(depth: int) -> list[Any]:
    root: list[Any] = []
    cur = root
    for _ in range(depth):
        cur.append([])
        cur = cur[0]
    return root


def test_a_value_nested_thousands_deep_is_refused_naming_its_field() -> None:
    # Quoting the value in the refusal must not recurse through it (a RecursionError would be
    # answered as an internal error that names no field).
    payload = fixture("plain-gpu-pod.json")
    limits = payload["request"]["object"]["spec"]["containers"][0]["resources"]["limits"]
    limits[c.RESOURCE_GPU] = _nested(5000)
    decision, _ = decide(payload)
    assert decision.response["allowed"] is False
    message = decision.response["status"]["message"]
    assert f"spec.containers[0].resources.limits[{c.RESOURCE_GPU}]" in message, message
    assert "internal error" not in message


def test_an_owner_reference_of_nested_values_is_no_owner() -> None:
    payload = fixture("plain-gpu-pod.json")
    payload["request"]["object"]["metadata"]["ownerReferences"] = [
        {"controller": True, "apiVersion": _nested(5000), "kind": _nested(5000), "name": "x"}]
    _, request = parse_review(payload)
    decision = review(request, POLICY)  # the patch is not applied: copying the pod would recurse
    assert decision.response["allowed"] is True, decision.response
