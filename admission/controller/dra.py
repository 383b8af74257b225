"""The controller's view of Dynamic Resource Allocation: GPUs nodes publish in ResourceSlices,
the claims that hold them, and the GPU demand of pods that ask through claims.

- **Nodes**: each node's DRA GPUs (:func:`admission.dra.slices.node_devices`) follow its
  device-plugin GPUs, indexes continuing after them; a node that publishes only slices gets
  its GPUs from them alone. A MIG device is a share of its parent GPU. A device claims may
  share by its memory (``allowMultipleAllocations``) is a GPU of its own kind: shares by
  consumable capacity go there only, whole-GPU claims there or to exclusive devices.
- **What claims hold**: every allocated claim's GPU devices are capacity held on their node,
  charged to the tenant of the claim's namespace (a share by capacity: the memory the
  allocation consumed, as a share of the device's memory); a claim used by several pods (a
  gang's shared claim) is counted once. A pod whose claims are allocated holds its claims'
  devices; one released by Berth whose claims are not allocated yet holds Berth's plan.
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
from admission.dra.claims import CLAIM, capacity_requests
from admission.dra.slices import (
    MIG_PARENT,
    Device,
    NodeDevices,
    claim_devices,
    mig_milli,
    node_devices,
)
from solver.types import GPU, MILLI, GpuShare, Node, NodeSelectorRequirement, PodRequest

#: The solver's model name of a DRA GPU: ``<model>@dra``. A pod that asks through claims can
#: only get DRA GPUs and a pod that asks for ``nvidia.com/gpu`` only device-plugin GPUs, even
#: on one node; models keep them apart in every solver, which already honours models.
DRA_MODEL_SUFFIX = c.DRA_MODEL_SUFFIX
MIG_MODEL_SUFFIX = c.DRA_MIG_MODEL_SUFFIX  # a GPU in MIG mode: only MIG devices, never whole
SHARED_MODEL_SUFFIX = c.DRA_SHARED_MODEL_SUFFIX  # claims share it by its memory
#: The model a pod is given when no GPU of its kind exists (it waits, and its reason says it).
NO_GPU = {"": "(a device-plugin GPU)", DRA_MODEL_SUFFIX: "(a whole GPU published through DRA)",
          MIG_MODEL_SUFFIX: "(a MIG device published through DRA)",
          SHARED_MODEL_SUFFIX: "(a GPU published through DRA that claims share by memory)"}
WAITING = "waiting: "  # prefix of a demand that cannot be read yet (the gang waits)
SHARING_DRA = "dra"  # the webhook's berth.dev/sharing value for a pod whose GPUs come from claims


def _kind(model: str) -> str:
    for suffix in c.DRA_MODEL_SUFFIXES:
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
    # (pool, device) -> (node, GPU index, milli, MiB of a device claims share by memory, else 0)
    # once the nodes are built
    where: dict[tuple[str, str], tuple[str, int, int, int]] = field(default_factory=dict)
    shared_devices: list[Device] = field(default_factory=list)  # those claims share, all nodes
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
            suffix = (MIG_MODEL_SUFFIX if dev.name.startswith(MIG_PARENT)
                      else SHARED_MODEL_SUFFIX if dev.shared else DRA_MODEL_SUFFIX)
            gpus.append(GPU(index=index, model=dev.model + suffix, memory_mib=dev.memory_mib,
                            nvlink_domain=clique))
            self.where[(dev.pool, dev.name)] = (node.name, index, MILLI,
                                                dev.memory_mib if dev.shared else 0)
            if dev.shared:
                self.shared_devices.append(dev)
            for mig in found.mig.get(dev.uuid, ()):
                self.where[(mig.pool, mig.name)] = (node.name, index, mig_milli(mig.profile)
                                                    or MILLI, 0)
        return replace(node, gpus=tuple(gpus))

    def solver_models(self, request: PodRequest, pod: Obj,
                      nodes: Mapping[str, Node]) -> PodRequest:
        """``request`` with the models that keep a DRA pod on DRA GPUs and a device-plugin pod
        on device-plugin GPUs (unchanged where no node has a DRA GPU)."""
        if not self.where or request.gpu_count == 0:
            return request
        if is_dra_pod(pod):
            suffixes: tuple[str, ...] = (DRA_MODEL_SUFFIX, SHARED_MODEL_SUFFIX)  # whole GPUs
            if request.gpu_milli < MILLI:
                suffixes = ((SHARED_MODEL_SUFFIX,) if request.gpu_memory_mib
                            else (MIG_MODEL_SUFFIX,))
            if request.models:
                models = frozenset(m + s for m in request.models for s in suffixes)
            else:  # no such GPU anywhere: a model no GPU has (the pod waits, saying so)
                models = (frozenset().union(*(self._models(nodes, s) for s in suffixes))
                          or frozenset({NO_GPU[suffixes[-1]]}))
            if suffixes == (SHARED_MODEL_SUFFIX,):
                return replace(request, models=models,
                               gpu_memory_mib=self.consumed_mib(request.gpu_memory_mib, models))
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

    def consumed_mib(self, mib: int, models: frozenset[str]) -> int:
        """The memory a share asking for ``mib`` is planned with: the most any shared device of
        ``models`` would consume for it after its request policy (the scheduler rounds up
        there), so a plan Berth makes fits whichever such device the allocator picks."""
        most = mib
        for dev in self.shared_devices:
            if dev.model + SHARED_MODEL_SUFFIX in models:
                most = max(most, dev.consumed_mib(mib) or mib)
        return most

    def _models(self, nodes: Mapping[str, Node], suffix: str) -> frozenset[str]:
        """The models of the GPUs of one kind: ``suffix`` "" (device plugin), "@dra",
        "@dra-mig" or "@dra-shared"."""
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
        by_capacity: set[str] | None = None
        for dev in claim_devices(claim):
            found = self.where.get((dev.pool, dev.device))
            if found is None:
                continue
            node = node or found[0]
            if found[0] != node:
                continue
            milli, memory = found[2], found[3]
            if memory and dev.consumed_mib:
                if by_capacity is None:  # a whole-GPU request holds the device whatever
                    by_capacity = capacity_requests(claim)  # it consumed
                if dev.request in by_capacity:  # a share: what it consumed of the memory
                    milli = min(MILLI, max(1, -(-dev.consumed_mib * MILLI // memory)))
            shares.append(GpuShare(found[1], milli))
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

    def demand(self, pod: Obj) -> tuple[int, int, int] | str:
        """(GPUs, milli each, MiB of GPU memory) the pod's claims ask for, or why that cannot
        be read (a claim made from a template that does not exist yet: ``waiting:`` and its
        name). A share by capacity is (1, 0, its memory): its milli is the webhook's (the
        memory's part of the smallest allowed model's), which is not the claim's to say."""
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
            return 1, mig_milli(ask.mig[0]), 0
        if ask.memory_mib:
            return 1, 0, ask.memory_mib
        return ask.count, MILLI, 0

