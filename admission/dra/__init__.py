"""GPUs through Dynamic Resource Allocation (``resource.k8s.io/v1``).

:mod:`.claims` reads what a pod's ResourceClaims and ResourceClaimTemplates ask of GPUs;
:mod:`.slices` reads the GPUs and MIG devices nodes publish in ResourceSlices and which of them
claims hold. Pure: the objects come in as API JSON (docs/dra.md).
"""

from admission.dra.claims import (
    CLAIM,
    DEFAULT_CLASSES,
    TEMPLATE,
    ClaimProblem,
    ClaimRef,
    Classes,
    GpuAsk,
    PodAsk,
    claim_spec,
    gpu_ask,
    pod_ask,
    pod_claims,
)

__all__ = [
    "CLAIM",
    "DEFAULT_CLASSES",
    "TEMPLATE",
    "ClaimProblem",
    "ClaimRef",
    "Classes",
    "GpuAsk",
    "PodAsk",
    "claim_spec",
    "gpu_ask",
    "pod_ask",
    "pod_claims",
]
