"""Which nodes a pod may use at all: health, taints, node selector, required affinity, models.

This mirrors the default scheduler's filters that Berth must respect, so that a pod released
onto a node is always schedulable there.
"""

from __future__ import annotations

from solver.types import Node, NodeSelectorRequirement, PodRequest, Taint, Toleration


def tolerates(tolerations: tuple[Toleration, ...], taint: Taint) -> bool:
    if taint.effect == "PreferNoSchedule":
        return True
    for t in tolerations:
        if t.effect and t.effect != taint.effect:
            continue
        if t.operator == "Exists" and (not t.key or t.key == taint.key):
            return True
        if t.operator == "Equal" and t.key == taint.key and t.value == taint.value:
            return True
    return False


def _matches(req: NodeSelectorRequirement, labels: dict[str, str] | object) -> bool:
    assert isinstance(labels, dict)
    present = req.key in labels
    value = labels.get(req.key)
    op = req.operator
    if op == "In":
        return present and value in req.values
    if op == "NotIn":
        return not present or value not in req.values
    if op == "Exists":
        return present
    if op == "DoesNotExist":
        return not present
    if op in ("Gt", "Lt") and present and req.values:
        try:
            have, want = int(str(value)), int(req.values[0])
        except ValueError:
            return False
        return have > want if op == "Gt" else have < want
    return False


def node_allows(pod: PodRequest, node: Node) -> bool:
    """True when the default scheduler would let ``pod`` run on ``node`` (ignoring capacity)."""
    if not node.usable:
        return False
    labels = dict(node.labels)
    for k, v in pod.node_selector.items():
        if labels.get(k) != v:
            return False
    if pod.affinity and not any(all(_matches(r, labels) for r in term) for term in pod.affinity):
        return False
    if any(not tolerates(pod.tolerations, t) for t in node.taints):
        return False
    if pod.gpu_count > 0:
        if not node.gpus:
            return False
        if pod.models and not any(g.model in pod.models for g in node.gpus):
            return False
    return True


def why_not(pod: PodRequest, node: Node) -> str | None:
    """The first filter that rules ``node`` out for ``pod``, in words; None when it passes."""
    if not node.schedulable:
        return "node is cordoned"
    if not node.ready:
        return "node is not ready"
    labels = dict(node.labels)
    for k, v in pod.node_selector.items():
        if labels.get(k) != v:
            return f"node selector {k}={v} does not match"
    if pod.affinity and not any(all(_matches(r, labels) for r in term) for term in pod.affinity):
        return "required node affinity does not match"
    for t in node.taints:
        if not tolerates(pod.tolerations, t):
            return f"untolerated taint {t.key}={t.value}:{t.effect}"
    if pod.gpu_count > 0 and not node.gpus:
        return "node has no GPU"
    if pod.gpu_count > 0 and pod.models and not any(g.model in pod.models for g in node.gpus):
        return f"no GPU of model {'/'.join(sorted(pod.models))}"
    return None
