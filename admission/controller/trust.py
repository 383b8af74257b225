"""What the controller believes about a pod, from what the webhook wrote or the API server
guarantees (contract 7), never from what the pod claims.

- **Tenant**: the policy's tenant of the pod's namespace. A pod in a namespace the policy does
  not manage has no tenant: it is never one of Berth's gangs and is charged to nobody.
- **Demand**: the webhook's demand annotations only where the pod's resources bear them out
  (:mod:`.demand`); the resources are what the scheduler and the device plugin enforce.
- **Placement**: which GPUs a pod holds comes from Berth's assignment annotations only for pods
  in managed namespaces (the webhook strips those keys at CREATE and an admission policy
  protects them after), only with Berth's plan id on the pod, and only when the shares match
  the pod's demand. Otherwise a bound pod is anonymous usage of whole GPUs by its resources,
  and an unbound pod holds nothing.
- **What a user may set** (gang size, priority, QoS class) is bounded by the tenant's policy.
"""

from __future__ import annotations

from admission.controller import demand
from admission.controller import translate as tr
from admission.controller.dra import DraState, is_dra_pod
from admission.controller.settings import Settings
from admission.controller.translate import Obj, TranslationError
from solver.types import MAX_PRIORITY, GpuShare


def tenant_of(pod: Obj, settings: Settings) -> str | None:
    """The policy's tenant of the pod's namespace; None when the namespace is not managed."""
    return settings.tenant_of_namespace(tr.namespace(pod))


def qos_of(pod: Obj, settings: Settings, tenant: str | None = None) -> str | None:
    """The pod's QoS class held to its tenant's ``allowedQosClasses`` (empty: any class the
    policy declares), else the tenant's default class. A pod of no tenant has none."""
    tenant = tenant if tenant is not None else tenant_of(pod, settings)
    if tenant is None:
        return None
    bounds = settings.bounds_of(tenant)
    allowed = bounds.allowed_qos_classes or settings.qos_classes
    named = tr.qos_class(pod)
    if named is not None and (not allowed or named in allowed):
        return named
    return bounds.default_qos_class


def priority_of(pod: Obj, settings: Settings, tenant: str) -> int:
    """The priority the pod asks for, held to its tenant's bound (``limits.maxPriority``, else
    ``admission.maxPriority``; lowest: its negative) and to what the solver takes
    (:data:`solver.types.MAX_PRIORITY`)."""
    top = MAX_PRIORITY
    cap = settings.bounds_of(tenant).max_priority
    if cap is not None:
        top = min(top, abs(cap))
    return max(-top, min(top, tr.priority(pod)))


def demand_problem(pod: Obj, settings: Settings, dra: DraState | None = None) -> str | None:
    """Why the pod's resources (its ResourceClaims, for a pod whose GPUs come from them) do not
    bear out its demand annotations (None: they do)."""
    try:
        return demand.problem(pod, settings.sharing, dra)
    except TranslationError as exc:
        return str(exc)


def planned_shares(pod: Obj, settings: Settings,
                   dra: DraState | None = None) -> tuple[str, tuple[GpuShare, ...]] | None:
    """The node and GPU shares Berth planned for the pod, when they can be believed: the pod is
    in a managed namespace, carries Berth's plan id and assignment, its resources bear out its
    demand, and the shares are that demand (``count`` GPUs of ``milli`` each)."""
    if tenant_of(pod, settings) is None or tr.plan_id(pod) is None:
        return None
    assigned = tr.assigned_shares(pod)
    if assigned is None or demand_problem(pod, settings, dra) is not None:
        return None
    try:
        count, milli, _ = tr.pod_gpu_demand(pod)
    except TranslationError:
        return None
    if dra is not None and is_dra_pod(pod):  # less what a claim shared with others covers
        count = dra.effective_count(pod, count)
    shares = assigned[1]
    if len(shares) != count or len({s.index for s in shares}) != count:
        return None
    if any(s.milli != milli for s in shares):  # several GPUs are whole: milli is 1000
        return None
    return assigned
