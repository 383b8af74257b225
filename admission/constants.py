"""Names Berth writes on pods and reads back: labels, annotations, its scheduling gate, env vars.

The webhook writes them at CREATE and the controller reads and extends them at release, so both
import them from here and a rename is one edit. Berth's own keys live under ``berth.dev/``; the
vocabulary of other projects that Berth accepts (Kueue, Volcano, KAI, HAMi, the NVIDIA device
plugin) is listed below under their owners' names so that nothing is spelled twice.
"""

from __future__ import annotations

from typing import Final

DOMAIN: Final = "berth.dev"

# --------------------------------------------------------------------------------------------
# The scheduling gate: added only at CREATE by the webhook, removed only by the release.
# --------------------------------------------------------------------------------------------
SCHEDULING_GATE: Final = f"{DOMAIN}/admission"

# --------------------------------------------------------------------------------------------
# Labels (selectable: the controller watches on them).
# --------------------------------------------------------------------------------------------
LABEL_MANAGED: Final = f"{DOMAIN}/managed"  # "true" on every pod the webhook admitted
LABEL_TENANT: Final = f"{DOMAIN}/tenant"  # always the namespace's tenant from policy
LABEL_GANG: Final = f"{DOMAIN}/gang"  # gang id, a valid label value (see ANNOTATION_GANG_NAME)
LABEL_QOS_CLASS: Final = f"{DOMAIN}/qos-class"

# --------------------------------------------------------------------------------------------
# Annotations a user may write (Berth's own vocabulary).
# --------------------------------------------------------------------------------------------
ANNOTATION_GANG: Final = f"{DOMAIN}/gang"  # explicit gang name
ANNOTATION_GANG_SIZE: Final = f"{DOMAIN}/gang-size"  # pods in the gang (int >= 1)
ANNOTATION_FRACTION: Final = f"{DOMAIN}/gpu-fraction"  # share of one GPU, (0, 1]
ANNOTATION_GPU_MEMORY: Final = f"{DOMAIN}/gpu-memory"  # MiB of GPU memory on one GPU
ANNOTATION_GPU_MODELS: Final = f"{DOMAIN}/gpu-models"  # comma-separated acceptable models
ANNOTATION_QOS_CLASS: Final = f"{DOMAIN}/qos-class"  # a QoS class named in the policy
ANNOTATION_TOPOLOGY: Final = f"{DOMAIN}/topology"  # "<level>" or "required:<level>"
ANNOTATION_PRIORITY: Final = f"{DOMAIN}/priority"  # int, higher first, bounded by policy
# How long the pod is expected to run, a duration ("2h", "90m", "1h30m", "3600s"): an estimate
# (nothing enforces it), bounded by admission.maxExpectedRuntimeSeconds; docs/reservations.md
ANNOTATION_EXPECTED_RUNTIME: Final = f"{DOMAIN}/expected-runtime"

# The only keys under berth.dev/ a pod may bring at CREATE (each validated by the webhook).
# Every other label or annotation under berth.dev/ is Berth's own: the webhook removes it from
# any pod that brings it, and writes Berth's values on the pods it admits. The QoS class label
# is read as input too (it must agree with the annotation), then rewritten with the class the
# webhook validated.
USER_ANNOTATIONS: Final = frozenset({
    ANNOTATION_GANG, ANNOTATION_GANG_SIZE, ANNOTATION_FRACTION, ANNOTATION_GPU_MEMORY,
    ANNOTATION_GPU_MODELS, ANNOTATION_QOS_CLASS, ANNOTATION_TOPOLOGY, ANNOTATION_PRIORITY,
    ANNOTATION_EXPECTED_RUNTIME,
})
BERTH_PREFIX: Final = f"{DOMAIN}/"


def berth_owned_label(key: str) -> bool:
    """Whether a pod label key is Berth's alone (every label under berth.dev/)."""
    return key.startswith(BERTH_PREFIX)


def berth_owned_annotation(key: str) -> bool:
    """Whether a pod annotation key is Berth's alone (under berth.dev/, not user input)."""
    return key.startswith(BERTH_PREFIX) and key not in USER_ANNOTATIONS


# --------------------------------------------------------------------------------------------
# Annotations the webhook writes for the controller (normalised demand; resources are
# immutable after CREATE and already translated into the sharing backend's vocabulary, so the
# controller reads the demand from here, never from the container resources).
# --------------------------------------------------------------------------------------------
ANNOTATION_TENANT: Final = f"{DOMAIN}/tenant"
ANNOTATION_GANG_NAME: Final = f"{DOMAIN}/gang-name"  # full gang name (labels cap at 63 chars)
ANNOTATION_GANG_SOURCE: Final = f"{DOMAIN}/gang-source"  # which key identified the gang
ANNOTATION_GPU_COUNT: Final = f"{DOMAIN}/gpu-count"  # GPUs the pod uses (int)
ANNOTATION_GPU_MILLI: Final = f"{DOMAIN}/gpu-milli"  # milli-GPU per GPU, 1..1000
ANNOTATION_GPU_MEMORY_MIB: Final = f"{DOMAIN}/gpu-memory-mib"  # normalised MiB (0: unset)
ANNOTATION_ALLOWED_MODELS: Final = f"{DOMAIN}/allowed-models"  # comma list; empty: any
ANNOTATION_SHARING: Final = f"{DOMAIN}/sharing"  # backend the resources were translated to
ANNOTATION_QUEUE: Final = f"{DOMAIN}/queue"  # release backend's queue for the tenant
ANNOTATION_POLICY_GENERATION: Final = f"{DOMAIN}/policy-generation"  # policy hash at admission

# --------------------------------------------------------------------------------------------
# Annotations the controller writes at release; read by containers through downward-API env.
# A pod may never bring these itself: the webhook strips them at CREATE.
# --------------------------------------------------------------------------------------------
ANNOTATION_ASSIGNED_NODE: Final = f"{DOMAIN}/assigned-node"
ANNOTATION_ASSIGNED_GPUS: Final = f"{DOMAIN}/assigned-gpus"  # GPU indexes, "0,1"
ANNOTATION_ASSIGNED_GPU_MILLI: Final = f"{DOMAIN}/assigned-gpu-milli"  # per GPU, "500,500"
ANNOTATION_ASSIGNED_AT: Final = f"{DOMAIN}/assigned-at"  # RFC 3339 time of release
ANNOTATION_PLAN: Final = f"{DOMAIN}/plan"  # id of the plan that released the pod
# When the pod is expected to end (RFC 3339) and where that comes from (a
# admission.controller.runtimes.Source), as the release saw it: shown to users, never read back
ANNOTATION_EXPECTED_END: Final = f"{DOMAIN}/expected-end"
ANNOTATION_RUNTIME_SOURCE: Final = f"{DOMAIN}/runtime-source"

ASSIGNMENT_ANNOTATIONS: Final = (
    ANNOTATION_ASSIGNED_NODE,
    ANNOTATION_ASSIGNED_GPUS,
    ANNOTATION_ASSIGNED_GPU_MILLI,
    ANNOTATION_ASSIGNED_AT,
    ANNOTATION_PLAN,
)

# Kubernetes' pod condition announcing a disruption (eviction, preemption); Berth sets it with
# REASON_RECLAIM before it evicts a gang for reclaim (docs/reclaim.md)
CONDITION_DISRUPTION_TARGET: Final = "DisruptionTarget"
REASON_RECLAIM: Final = "BerthReclaim"
# The Event reason on each pod Berth evicts for reclaim (read by berth status)
EVENT_RECLAIMED: Final = "Reclaimed"

# --------------------------------------------------------------------------------------------
# Downward-API env vars the webhook adds to each GPU container: env name -> field path.
# Kubelet resolves them at container start, after the release wrote the annotations.
# --------------------------------------------------------------------------------------------
ENV_GPU_ASSIGNMENT: Final = "BERTH_GPU_ASSIGNMENT"
ENV_GPU_MILLI: Final = "BERTH_GPU_MILLI"
ENV_NODE: Final = "BERTH_ASSIGNED_NODE"
ENV_TENANT: Final = "BERTH_TENANT"
ENV_GANG: Final = "BERTH_GANG"

DOWNWARD_ENV: Final = (
    (ENV_GPU_ASSIGNMENT, f"metadata.annotations['{ANNOTATION_ASSIGNED_GPUS}']"),
    (ENV_GPU_MILLI, f"metadata.annotations['{ANNOTATION_ASSIGNED_GPU_MILLI}']"),
    (ENV_NODE, f"metadata.annotations['{ANNOTATION_ASSIGNED_NODE}']"),
    (ENV_TENANT, f"metadata.labels['{LABEL_TENANT}']"),
    (ENV_GANG, f"metadata.labels['{LABEL_GANG}']"),
)

# --------------------------------------------------------------------------------------------
# Vocabulary of other projects that Berth reads (notes/ecosystem-keys.md).
# --------------------------------------------------------------------------------------------
RESOURCE_GPU: Final = "nvidia.com/gpu"
NVIDIA_PREFIX: Final = "nvidia.com/"
RESOURCE_MIG_PREFIX: Final = "nvidia.com/mig-"  # MIG mixed strategy: nvidia.com/mig-<profile>
LABEL_GPU_PRODUCT: Final = "nvidia.com/gpu.product"  # GPU Feature Discovery node label
# Dynamic Resource Allocation (resource.k8s.io/v1), as NVIDIA's DRA driver publishes GPUs.
DRA_DRIVER: Final = "gpu.nvidia.com"  # the driver; also the prefix of its device attributes
DRA_GPU_CLASS: Final = "gpu.nvidia.com"  # DeviceClass of whole GPUs
DRA_MIG_CLASS: Final = "mig.nvidia.com"  # DeviceClass of MIG devices
LABEL_GPU_CLIQUE: Final = "nvidia.com/gpu.clique"  # node label: the NVLink domain of its GPUs
# The solver's model names of DRA GPUs (<model>@dra, <model>@dra-mig for a GPU in MIG mode,
# <model>@dra-shared for one claims share by its memory): models keep pods on the kind of GPU
# they can be bound to (admission/controller/dra.py).
DRA_MODEL_SUFFIX: Final = "@dra"
DRA_MIG_MODEL_SUFFIX: Final = "@dra-mig"
DRA_SHARED_MODEL_SUFFIX: Final = "@dra-shared"
DRA_MODEL_SUFFIXES: Final = (DRA_MODEL_SUFFIX, DRA_MIG_MODEL_SUFFIX, DRA_SHARED_MODEL_SUFFIX)

KUEUE_QUEUE_LABEL: Final = "kueue.x-k8s.io/queue-name"
KUEUE_POD_GROUP_LABEL: Final = "kueue.x-k8s.io/pod-group-name"
KUEUE_POD_GROUP_COUNT: Final = "kueue.x-k8s.io/pod-group-total-count"  # annotation
KUEUE_GATE: Final = "kueue.x-k8s.io/admission"
# Kueue's maximum execution time of a Workload (whole seconds), read from the pod by Kueue's
# plain-pod integration and enforced by its workload controller (docs/reservations.md)
KUEUE_MAX_EXEC_LABEL: Final = "kueue.x-k8s.io/max-exec-time-seconds"

VOLCANO_GROUP_ANNOTATION: Final = "scheduling.k8s.io/group-name"
VOLCANO_QUEUE_ANNOTATION: Final = "volcano.sh/queue-name"
VOLCANO_SCHEDULER: Final = "volcano"

KAI_QUEUE_LABEL: Final = "kai.scheduler/queue"
KAI_POD_GROUP: Final = "pod-group-name"  # annotation
KAI_FRACTION: Final = "gpu-fraction"  # annotation
KAI_MEMORY: Final = "gpu-memory"  # annotation, MiB
KAI_FRACTION_DEVICES: Final = "gpu-fraction-num-devices"  # annotation
KAI_FRACTION_CONTAINER: Final = "gpu-fraction-container-name"  # annotation

HAMI_GPU_TYPE: Final = "nvidia.com/use-gputype"  # annotation, comma list of models
HAMI_GPU_MEM: Final = "nvidia.com/gpumem"
HAMI_GPU_MEM_PERCENT: Final = "nvidia.com/gpumem-percentage"
HAMI_GPU_CORES: Final = "nvidia.com/gpucores"

# Owners whose pods form a gang without any gang key (label on the pod -> gang kind).
JOB_NAME_LABEL: Final = "batch.kubernetes.io/job-name"
JOBSET_NAME_LABEL: Final = "jobset.sigs.k8s.io/jobset-name"
JOBSET_REPLICAS_ANNOTATION: Final = "jobset.sigs.k8s.io/replicatedjob-replicas"
PYTORCHJOB_NAME_LABEL: Final = "training.kubeflow.org/job-name"
RAY_CLUSTER_LABEL: Final = "ray.io/cluster"
