"""The patches of the release protocol, as pure functions over pod JSON (KEP-3838 rules).

While a pod still has scheduling gates, its scheduling directives may only be tightened: node
selector keys added, required node-affinity expressions appended to *every* existing term (or
the affinity set when there is none), tolerations added, gates removed (never added). Two
patches make a release:

1. :func:`placement_ops` writes the assignment annotations and the backend's labels. They are
   plain metadata, so a gang whose writes were interrupted is simply planned again and the
   annotations overwritten.
2. :func:`release_ops` pins the pod to its node (required affinity on ``metadata.name``) and
   removes Berth's gate in the same update, guarded by ``test`` operations so that it applies
   only to the very pod (uid) that still carries Berth's gate. Pinning and ungating in one
   update means no pod is ever pinned yet still held, and no pod ever leaves the gate unpinned.

Every function returns ``[]`` when there is nothing left to change, which makes each step
idempotent. :func:`tightening_errors` states the KEP-3838 rules as a check; the release applies
it to its own patches before sending them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from admission import constants as c
from admission.controller import keys
from admission.controller.translate import Obj, annotations_of, labels, meta, spec
from admission.jsonpatch import PatchOp, pointer


def _map_ops(section: str, current: Mapping[str, str] | None, want: Mapping[str, str],
             obj_meta: Obj) -> list[PatchOp]:
    todo = {k: v for k, v in want.items() if (current or {}).get(k) != v}
    if not todo:
        return []
    if obj_meta.get(section) is None:
        return [{"op": "add", "path": pointer(("metadata", section)), "value": dict(todo)}]
    return [{"op": "add", "path": pointer(("metadata", section, k)), "value": v}
            for k, v in sorted(todo.items())]


def placement_ops(pod: Obj, *, annotations_: Mapping[str, str],
                  labels_: Mapping[str, str], drop: tuple[str, ...] = ()) -> list[PatchOp]:
    """Set ``annotations_`` and ``labels_`` on the pod and remove the annotations ``drop``
    names (what an earlier plan wrote that this one does not); ``[]`` when all is so."""
    m = meta(pod)
    ops = _map_ops("annotations", annotations_of(pod), annotations_, m)
    ops += [{"op": "remove", "path": pointer(("metadata", "annotations", k))}
            for k in drop if k in annotations_of(pod) and k not in annotations_]
    ops += _map_ops("labels", labels(pod), labels_, m)
    if ops:
        ops.insert(0, {"op": "test", "path": "/metadata/uid", "value": m.get("uid")})
    return ops


def pin_requirement(node: str) -> dict[str, Any]:
    return {"key": keys.FIELD_NODE_NAME, "operator": "In", "values": [node]}


def _pinned_term(term: Mapping[str, Any], node: str) -> bool:
    return pin_requirement(node) in (term.get("matchFields") or [])


def affinity_ops(pod: Obj, node: str) -> list[PatchOp]:
    """Pin the pod to ``node`` through required node affinity under KEP-3838's rules; ``[]`` when
    every term already carries the pin."""
    s = spec(pod)
    affinity = s.get("affinity")
    node_aff = (affinity or {}).get("nodeAffinity")
    required = (node_aff or {}).get("requiredDuringSchedulingIgnoredDuringExecution")
    terms = (required or {}).get("nodeSelectorTerms") or []
    new_required = {"nodeSelectorTerms": [{"matchFields": [pin_requirement(node)]}]}
    base = "/spec/affinity/nodeAffinity/requiredDuringSchedulingIgnoredDuringExecution"
    if not terms:
        # No required affinity yet: it may be set outright.
        if affinity is None:
            return [{"op": "add", "path": "/spec/affinity",
                     "value": {"nodeAffinity": {
                         "requiredDuringSchedulingIgnoredDuringExecution": new_required}}}]
        if node_aff is None:
            return [{"op": "add", "path": "/spec/affinity/nodeAffinity",
                     "value": {"requiredDuringSchedulingIgnoredDuringExecution": new_required}}]
        return [{"op": "add", "path": base, "value": new_required}]
    ops: list[PatchOp] = []
    for i, term in enumerate(terms):
        if _pinned_term(term, node):
            continue
        if term.get("matchFields"):
            ops.append({"op": "add", "path": f"{base}/nodeSelectorTerms/{i}/matchFields/-",
                        "value": pin_requirement(node)})
        else:
            ops.append({"op": "add", "path": f"{base}/nodeSelectorTerms/{i}/matchFields",
                        "value": [pin_requirement(node)]})
    return ops


def release_ops(pod: Obj, node: str) -> list[PatchOp]:
    """Pin to ``node`` and remove Berth's gate (only Berth's) in one guarded update; ``[]`` when
    the gate is already gone."""
    gates = [g.get("name") for g in spec(pod).get("schedulingGates") or []]
    if c.SCHEDULING_GATE not in gates:
        return []
    i = gates.index(c.SCHEDULING_GATE)
    return [
        {"op": "test", "path": "/metadata/uid", "value": meta(pod).get("uid")},
        {"op": "test", "path": f"/spec/schedulingGates/{i}/name", "value": c.SCHEDULING_GATE},
        *affinity_ops(pod, node),
        {"op": "remove", "path": f"/spec/schedulingGates/{i}"},
    ]


def is_pinned(pod: Obj, node: str) -> bool:
    """Whether the pod's required node affinity already pins it to ``node``. Used by the tests
    only, to check what :func:`release_ops` wrote."""
    return not affinity_ops(pod, node)


# --------------------------------------------------------------------------------------------
# The KEP-3838 rules as a check (old pod still gated -> new pod)
# --------------------------------------------------------------------------------------------


def _required_terms(pod: Obj) -> list[Mapping[str, Any]] | None:
    req = (((spec(pod).get("affinity") or {}).get("nodeAffinity") or {})
           .get("requiredDuringSchedulingIgnoredDuringExecution"))
    return None if req is None else list(req.get("nodeSelectorTerms") or [])


def _extends(old: list[Any], new: list[Any]) -> bool:
    return new[: len(old)] == old


def tightening_errors(old: Obj, new: Obj) -> list[str]:
    """Why ``new`` is not an allowed update of the gated pod ``old``; ``[]`` when it is."""
    errors: list[str] = []
    old_gates = [g.get("name") for g in spec(old).get("schedulingGates") or []]
    new_gates = [g.get("name") for g in spec(new).get("schedulingGates") or []]
    if not old_gates:
        if spec(old) != spec(new):
            errors.append("spec: only a gated pod's scheduling directives may change")
        return errors
    if any(g not in old_gates for g in new_gates):
        errors.append("spec.schedulingGates: gates may be removed, never added")
    old_sel = spec(old).get("nodeSelector") or {}
    new_sel = spec(new).get("nodeSelector") or {}
    if any(new_sel.get(k) != v for k, v in old_sel.items()):
        errors.append("spec.nodeSelector: existing keys may not change")
    old_terms, new_terms = _required_terms(old), _required_terms(new)
    if old_terms is not None:
        if new_terms is None or len(new_terms) != len(old_terms):
            errors.append("spec.affinity.nodeAffinity.required: terms may not be added or removed")
        else:
            for i, (a, b) in enumerate(zip(old_terms, new_terms, strict=True)):
                for part in ("matchExpressions", "matchFields"):
                    if not _extends(list(a.get(part) or []), list(b.get(part) or [])):
                        errors.append(f"spec.affinity.nodeAffinity.required.nodeSelectorTerms[{i}]"
                                      f".{part}: requirements may only be appended")
    old_tol = list(spec(old).get("tolerations") or [])
    if not _extends(old_tol, list(spec(new).get("tolerations") or [])):
        errors.append("spec.tolerations: tolerations may only be added")
    mutable = ("schedulingGates", "nodeSelector", "affinity", "tolerations")
    rest_old = {k: v for k, v in spec(old).items() if k not in mutable}
    rest_new = {k: v for k, v in spec(new).items() if k not in mutable}
    if rest_old != rest_new:
        changed = sorted(k for k in set(rest_old) | set(rest_new)
                         if rest_old.get(k) != rest_new.get(k))
        errors.append(f"spec.{changed[0]}: immutable")
    return errors
