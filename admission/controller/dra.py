"""The controller's view of Dynamic Resource Allocation: GPUs nodes publish in ResourceSlices,
the claims that hold them, and the GPU demand of pods that ask through claims.

- **Nodes**: each node's DRA GPUs (:func:`admission.dra.slices.node_devices`) follow its
  device-plugin GPUs, indexes continuing after them; a node that publishes only slices gets
  its GPUs from them alone. A MIG device is a share of its parent GPU.
- **What claims hold**: every allocated claim's GPU devices are capacity held on their node,
  charged to the tenant of the claim's namespace; a claim used by several pods (a gang's shared
  claim) is counted once. A pod whose claims are allocated holds its claims' devices; one
  released by Berth whose claims are not allocated yet holds Berth's plan.
- **Demand** of a pod whose GPUs come from claims (``berth.dev/sharing: dra``, written by the
  webhook): read again from the claims themselves, never from the pod's annotations alone. A
  claim made from a template is read once the claim exists (the resource claim controller
  creates it for the pod): the template may have been replaced since the webhook read it, the
  claim is what the scheduler allocates. Until it exists the gang waits.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from admission import constants as c
from admission.controller import keys
from admission.controller import translate as tr
from admission.controller.translate import Obj
from admission.dra import (
    DEFAULT_CLASSES,
    TEMPLATE,
    ClaimProblem,
    claim_spec,
    gpu_ask,
    pod_ask,
    pod_claims,
)
from admission.dra.claims import CLAIM
from admission.dra.slices import MIG_PARENT, NodeDevices, claim_devices, mig_milli, node_devices
from solver.types import GPU, MILLI, GpuShare, Node, NodeSelectorRequirement, PodRequest

#: The solver's model name of a DRA GPU: ``<model>@dra``. A pod that asks through claims can
#: only get DRA GPUs and a pod that asks for ``nvidia.com/gpu`` only device-plugin GPUs, even
#: on one node; models keep them apart in every solver, which already honours models.
DRA_MODEL_SUFFIX = c.DRA_MODEL_SUFFIX
MIG_MODEL_SUFFIX = c.DRA_MIG_MODEL_SUFFIX  # a GPU in MIG mode: only MIG devices, never whole
#: The model a pod is given when no GPU of its kind exists (it waits, and its reason says it).
NO_GPU = {"": "(a device-plugin GPU)", DRA_MODEL_SUFFIX: "(a whole GPU published through DRA)",
          MIG_MODEL_SUFFIX: "(a MIG device published through DRA)"}
WAITING = "waiting: "  # prefix of a demand that cannot be read yet (the gang waits)
SHARING_DRA = "dra"  # the webhook's berth.dev/sharing value for a pod whose GPUs come from claims


def _kind(model: str) -> str:
    for suffix in (MIG_MODEL_SUFFIX, DRA_MODEL_SUFFIX):
        if model.endswith(suffix):
            return suffix
    return ""


def _generated(pod: Obj) -> dict[str, str]:
    """The pod's claim name -> the ResourceClaim made for it from a template
    (``status.resourceClaimStatuses``)."""
    return {str(s.get("name")): s["resourceClaimName"]
            for s in (pod.get("status") or {}).get("resourceClaimStatuses") or []
            if isinstance(s, dict) and isinstance(s.get("resourceClaimName"), str)}


def is_dra_pod(pod: Obj) -> bool:
    return tr.annotations_of(pod).get(c.ANNOTATION_SHARING) == SHARING_DRA


@dataclass(slots=True)
class DraState:
    """DRA objects of one cycle's view, with the look-ups the snapshot needs."""

    devices: dict[str, NodeDevices] = field(default_factory=dict)
    claims: Mapping[str, Obj] = field(default_factory=dict)  # namespace/name
    # (pool, device) -> (node, GPU index, milli) once the nodes are built
    where: dict[tuple[str, str], tuple[str, int, int]] = field(default_factory=dict)
    # claim namespace/name -> the live pods naming it by resourceClaimName, sorted: the first
    # is charged for its GPUs, the others share them
    users: dict[str, list[str]] = field(default_factory=dict)
    # a GPU DeviceClass maps nvidia.com/gpu to DRA devices (extendedResourceName): a pod that
    # asks for nvidia.com/gpu may then get device-plugin or DRA GPUs
    mapped: bool = False
    _model_sets: dict[str, frozenset[str]] = field(default_factory=dict)

    @staticmethod
    def from_view(view: Any) -> DraState:
        users: dict[str, list[str]] = {}
        for key, pod in view.pods.items():
            spec = pod.get("spec") or {}
            for ref in spec.get("resourceClaims") or []:
                if isinstance(ref, dict) and isinstance(ref.get("resourceClaimName"), str):
                    users.setdefault(f"{tr.namespace(pod)}/{ref['resourceClaimName']}",
                                     []).append(key)
        for pods in users.values():
            pods.sort()
        mapped = any(
            (cls.get("spec") or {}).get("extendedResourceName") == c.RESOURCE_GPU
            and (cls.get("metadata") or {}).get("name") in DEFAULT_CLASSES.gpu
            for cls in view.dra_of("deviceclasses").values())
        return DraState(devices=node_devices(view.dra_of("resourceslices").values()),
                        claims=view.dra_of("resourceclaims"), users=users, mapped=mapped)

    # ------------------------------------------------------------------ shared claims
    def shared(self, pod: Obj) -> tuple[int, str | None, bool]:
        """What sharing takes off the pod's demand: (GPUs of its named claims that another pod
        is charged for, or that are allocated already; the node of such an allocated claim;
        whether it shares a claim with another pod that is not allocated yet, so they must
        meet on one node)."""
        ns, key = tr.namespace(pod), tr.pod_key(pod)
        off, node, together = 0, None, False
        for ref in (pod.get("spec") or {}).get("resourceClaims") or []:
            name = ref.get("resourceClaimName") if isinstance(ref, dict) else None
            if not isinstance(name, str):
                continue
            claim_key = f"{ns}/{name}"
            claim = self.claims.get(claim_key)
            if claim is None:
                continue
            held = self.claim_shares(claim_key)
            first = (self.users.get(claim_key) or [key])[0] == key
            if held is None and first:
                together = together or len(self.users.get(claim_key) or ()) > 1
                continue
            try:
                ask = gpu_ask(claim_spec(claim, CLAIM), "claim")
            except ClaimProblem:
                continue
            off += ask.count + len(ask.mig)
            if held is not None:
                node = node or held[0]
            else:
                together = True
        return off, node, together

    def effective_count(self, pod: Obj, count: int) -> int:
        """The GPUs the pod is charged for: ``count`` less what a shared claim covers."""
        return max(0, count - self.shared(pod)[0]) if self.users else count

    @staticmethod
    def share_claims(request: PodRequest, off: int, node: str | None) -> PodRequest:
        """``request`` less ``off`` GPUs of shared claims, pinned to ``node``, that of an
        allocated shared claim (:meth:`shared` says both)."""
        if not off and node is None:
            return request
        count = max(0, request.gpu_count - off)
        affinity = request.affinity
        if node is not None:
            pin = NodeSelectorRequirement(keys.FIELD_NODE_NAME, "In", (node,))
            affinity = tuple((*t, pin) for t in affinity) if affinity else ((pin,),)
        return replace(request, gpu_count=count, gpu_milli=request.gpu_milli if count else 0,
                       gpu_memory_mib=request.gpu_memory_mib if count else 0,
                       affinity=affinity)

    # ------------------------------------------------------------------ nodes
    def extend(self, node: Node) -> Node:
        """``node`` with its DRA GPUs after its device-plugin GPUs."""
        found = self.devices.get(node.name)
        if found is None or not found.gpus:
            return node
        gpus = list(node.gpus)
        start = max((g.index for g in gpus), default=-1) + 1
        for i, dev in enumerate(found.gpus):
            index = start + i
            clique = dev.clique or node.labels.get(c.LABEL_GPU_CLIQUE) or None
            in_mig_mode = dev.name.startswith(MIG_PARENT)
            gpus.append(GPU(index=index, model=dev.model + (MIG_MODEL_SUFFIX if in_mig_mode
                                                            else DRA_MODEL_SUFFIX),
                            memory_mib=dev.memory_mib,
                            nvlink_domain=clique))
            self.where[(dev.pool, dev.name)] = (node.name, index, MILLI)
            for mig in found.mig.get(dev.uuid, ()):
                self.where[(mig.pool, mig.name)] = (node.name, index, mig_milli(mig.profile)
                                                    or MILLI)
        return replace(node, gpus=tuple(gpus))

    def solver_models(self, request: PodRequest, pod: Obj,
                      nodes: Mapping[str, Node]) -> PodRequest:
        """``request`` with the models that keep a DRA pod on DRA GPUs and a device-plugin pod
        on device-plugin GPUs (unchanged where no node has a DRA GPU)."""
        if not self.where or request.gpu_count == 0:
            return request
        if is_dra_pod(pod):
            suffix = MIG_MODEL_SUFFIX if request.gpu_milli < MILLI else DRA_MODEL_SUFFIX
            if request.models:
                models = frozenset(m + suffix for m in request.models)
            else:  # no such GPU anywhere: a model no GPU has (the pod waits, saying so)
                models = self._models(nodes, suffix) or frozenset({NO_GPU[suffix]})
        elif self.mapped:  # nvidia.com/gpu through the device plugin or through DRA
            models = (request.models | {m + DRA_MODEL_SUFFIX for m in request.models}
                      if request.models else
                      self._models(nodes, "") | self._models(nodes, DRA_MODEL_SUFFIX))
            models = models or frozenset({NO_GPU[""]})
        elif request.models:
            return request
        else:
            models = self._models(nodes, "") or frozenset({NO_GPU[""]})
        return replace(request, models=models)

    def _models(self, nodes: Mapping[str, Node], suffix: str) -> frozenset[str]:
        """The models of the GPUs of one kind: ``suffix`` "" (device plugin), "@dra" or
        "@dra-mig"."""
        found = self._model_sets.get(suffix)
        if found is None:
            found = self._model_sets[suffix] = frozenset(
                g.model for n in nodes.values() for g in n.gpus if _kind(g.model) == suffix)
        return found

    # ------------------------------------------------------------------ claims
    def claim_shares(self, key: str) -> tuple[str, tuple[GpuShare, ...]] | None:
        """The node and GPU shares an allocated claim holds (None: not allocated, no GPU, or
        devices of no node Berth knows)."""
        claim = self.claims.get(key)
        if claim is None:
            return None
        node, shares = None, []
        for dev in claim_devices(claim):
            found = self.where.get((dev.pool, dev.device))
            if found is None:
                continue
            node = node or found[0]
            if found[0] == node:
                shares.append(GpuShare(found[1], found[2]))
        return (node, tuple(shares)) if node and shares else None

    @staticmethod
    def pod_claim_keys(pod: Obj) -> list[str]:
        """namespace/name of each claim the pod uses that exists (a template's once made)."""
        ns, generated = tr.namespace(pod), _generated(pod)
        keys: list[str] = []
        extended = ((pod.get("status") or {}).get("extendedResourceClaimStatus") or {})
        if isinstance(extended, dict) and isinstance(extended.get("resourceClaimName"), str):
            keys.append(f"{ns}/{extended['resourceClaimName']}")  # nvidia.com/gpu through DRA
        try:
            refs = pod_claims(pod)
        except ClaimProblem:
            return keys
        for ref in refs:
            if ref.kind == CLAIM:
                keys.append(f"{ns}/{ref.object}")
            elif ref.name in generated:
                keys.append(f"{ns}/{generated[ref.name]}")
        return keys

    def demand(self, pod: Obj) -> tuple[int, int] | str:
        """(GPUs, milli each) the pod's claims ask for, or why that cannot be read (a claim
        made from a template that does not exist yet: ``waiting:`` and its name)."""
        ns, generated = tr.namespace(pod), _generated(pod)
        lookup: dict[tuple[str, str], Obj | None] = {}
        try:
            refs = pod_claims(pod)
        except ClaimProblem as exc:
            return str(exc)
        for ref in refs:
            if ref.kind == CLAIM:
                lookup[(CLAIM, ref.object)] = self.claims.get(f"{ns}/{ref.object}")
                continue
            made = generated.get(ref.name)
            claim = self.claims.get(f"{ns}/{made}") if made is not None else None
            if claim is None:
                return (f"{WAITING}the ResourceClaim of {ref.path} (from template "
                        f"{ref.object}) is not created yet")
            lookup[(TEMPLATE, ref.object)] = {"spec": {"spec": claim.get("spec") or {}}}
        try:
            ask = pod_ask(pod, lookup)
        except ClaimProblem as exc:
            return str(exc)
        if ask is None:
            return "its ResourceClaims ask for no GPU"
        if ask.mig:
            if ask.count or len(ask.mig) != 1 or not mig_milli(ask.mig[0]):
                return "its ResourceClaims ask for MIG devices Berth cannot plan"
            return 1, mig_milli(ask.mig[0])
        return ask.count, MILLI

