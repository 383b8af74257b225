"""The policy's JSON Schema, generated from the model, and the field table the reference shows.

``config/policy/policy.schema.json`` is what editors validate policy files against as users
type (the sample files name it in a ``yaml-language-server`` modeline). It is pydantic's
``model_json_schema`` of :class:`~admission.policy.model.Policy`, under the YAML spelling
(aliases), post-processed:

- draft 2020-12 with ``$schema``, ``$id``, ``title`` and ``description``;
- every field described: its model ``Field(description=...)`` when it has one, else the entry
  in :data:`FIELD_DOCS` here (both are checked complete by the tests), class docstrings for
  the objects;
- defaults from ``default_factory`` filled in (the topology levels, the MIG profiles); the
  defaults of whole sections left out, since their fields carry their own;
- pydantic's generated titles ("Windowseconds") dropped, optional values written as
  ``type: [number, "null"]`` rather than ``anyOf``, which editors report more plainly;
- the few rules that relate fields and that JSON Schema can state (``if``/``then``): a
  latency-sensitive class needs its latency and SLO, a topology level other than ``nvlink`` or
  ``node`` needs its node label, a release backend with queues needs each tenant's queue.
  The other cross-references (a QoS class a tenant names must exist, ...) only
  ``berth policy check`` judges.

``berth docs`` regenerates the file (and the reference pages); the tests fail when the
committed file differs from what this module generates.
"""

from __future__ import annotations

import copy
import json
import re
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel
from pydantic.json_schema import GenerateJsonSchema, NoDefault
from pydantic_core import core_schema

from admission.backends import BACKENDS
from admission.policy.model import API_VERSION, Policy

SCHEMA_FILE = "config/policy/policy.schema.json"  # relative to the repository root
SCHEMA_ID = f"https://berth.dev/schemas/{API_VERSION.split('/')[-1]}/policy.schema.json"
DRAFT = "https://json-schema.org/draft/2020-12/schema"
MODELINE = "# yaml-language-server: $schema="

Json = dict[str, Any]

# --------------------------------------------------------------------------------------------
# Field descriptions, by model class and YAML key. A ``Field(description=...)`` in the model
# takes precedence; a field with neither fails tests/admission/policy/test_policy_schema.py.
# --------------------------------------------------------------------------------------------
FIELD_DOCS: dict[str, str] = {
    # Policy
    "Policy.apiVersion": "The policy format's version.",
    "Policy.kind": "Always `Policy`.",
    "Policy.tenants": "Who may use the cluster. A pod's tenant is always its namespace's "
    "tenant; pods in namespaces no tenant lists pass the webhook untouched (less any "
    "Berth-owned `berth.dev/` key or gate they bring).",
    "Policy.gpuModels": "GPU models as GPU Feature Discovery names them (node label "
    "`nvidia.com/gpu.product`), with the memory that turns a GPU-memory request into a share "
    "and the power figures of the energy term.",
    "Policy.sharing": "How a fraction of a GPU reaches the node.",
    "Policy.topology": "The topology levels gangs may ask to stay within.",
    "Policy.qosClasses": "Workload classes and their interference profiles; the classes a "
    "tenant, `batch.fastPathClasses` or `noShareWith` names must be declared here.",
    "Policy.batch": "The batch window and gang timeouts.",
    "Policy.solver": "The CP-SAT solver's time limit and objective weights.",
    "Policy.release": "Where admitted pods go when Berth opens their gate.",
    "Policy.admission": "Webhook behaviour the admin chooses.",
    # Tenant
    "Tenant.name": "The tenant's name (RFC 1123 label), unique in the file; the "
    "`berth.dev/tenant` label of its pods.",
    "Tenant.namespaces": "Namespaces whose GPU pods belong to this tenant; a namespace "
    "belongs to at most one tenant.",
    "Tenant.quota": "GPUs the tenant is guaranteed.",
    "Tenant.weight": "Fair-share weight when tenants compete for idle GPUs.",
    "Tenant.borrowing": "Whether the tenant may use other tenants' idle quota.",
    "Tenant.allowedModels": "GPU models its pods may use, each declared under `gpuModels` "
    "(when any are); empty: any model.",
    "Tenant.allowedQosClasses": "QoS classes its pods may name (declared under "
    "`qosClasses`); empty: any class.",
    "Tenant.defaultQosClass": "The QoS class of its pods that name none (annotation "
    "`berth.dev/qos-class`); declared under `qosClasses`.",
    "Tenant.priority": "Default priority of its gangs; a pod may set `berth.dev/priority`. "
    "Higher goes first; waiting adds `solver.weights.agingPerHour` per hour. Must lie within "
    "the tenant's priority bound (`limits.maxPriority`, else `admission.maxPriority`).",
    "Tenant.limits": "Per-request ceilings checked at admission.",
    "Tenant.queues": "The tenant's queue in each release backend that has queues.",
    # Quota, Borrowing, Limits, Queues
    "Quota.gpus": "Guaranteed GPUs, whole or fractional (e.g. 2.5); unset: unlimited.",
    "Borrowing.enabled": "May use the quota other tenants leave idle, beyond its own.",
    "Borrowing.limitGpus": "Most GPUs it may borrow beyond its own quota; unset: no cap.",
    "Limits.maxGpusPerPod": "A pod asking for more GPUs is refused at admission; unset: "
    "no limit.",
    "Limits.maxGangSize": "A gang of more pods is refused at admission; unset: no limit.",
    "Limits.maxPriority": "Highest `berth.dev/priority` a pod of the tenant may ask for (the "
    "lowest is its negative); a pod beyond it is refused at admission with the bound named. "
    "Unset: `admission.maxPriority`.",
    "Queues.kueue": "The Kueue LocalQueue, in each of the tenant's namespaces; required when "
    "`release.backend` is `kueue`.",
    "Queues.volcano": "The Volcano Queue; required when `release.backend` is `volcano`.",
    # GPUs
    "GpuModel.name": "The model as GPU Feature Discovery labels it, e.g. "
    "`NVIDIA-A100-SXM4-80GB`; unique in the file.",
    "GpuModel.memoryMiB": "Memory of one GPU of this model, in MiB.",
    "GpuModel.idleWatts": "Power of an idle GPU, in watts (energy term and simulator).",
    "GpuModel.activeWatts": "Power of a busy GPU, in watts (energy term and simulator).",
    # Sharing
    "Sharing.backend": "How fractions reach the node: `none` (whole GPUs only; fractions "
    "are refused), `time-slicing`, `mps`, `mig` (the smallest MIG profile that holds the "
    "share and memory) or `hami`.",
    "Sharing.fractionGrid": "The shares of one GPU a pod may ask for, strictly increasing; "
    "a share derived from GPU memory alone is rounded up to the next value.",
    "Sharing.timeSlicing": "Settings of the `time-slicing` backend.",
    "Sharing.mps": "Settings of the `mps` backend.",
    "Sharing.mig": "Settings of the `mig` backend.",
    "TimeSlicing.resourceName": "The resource the device plugin advertises the slots as.",
    "TimeSlicing.replicas": "Slots per GPU; every value of `fractionGrid` times this must be "
    "a whole number.",
    "Mps.resourceName": "The resource the device plugin advertises MPS slots as.",
    "Mig.profiles": "The MIG profiles the nodes offer (mixed strategy).",
    "MigProfile.name": "The profile, e.g. `1g.10gb`; resource `nvidia.com/mig-<name>`.",
    "MigProfile.fraction": "Its share of the GPU's compute.",
    "MigProfile.memoryMiB": "Its memory, in MiB.",
    # Topology
    "Topology.levels": "Levels of the topology, finest first. A gang may ask to stay within "
    "one domain of a level (annotation `berth.dev/topology: rack`, or `required:rack`).",
    "TopologyLevel.name": "The level's name, unique in the list: `nvlink` (from the GPUs), "
    "`node` (the node name) or any other (from `nodeLabel`).",
    "TopologyLevel.nodeLabel": "The node label that holds the level's domain; required "
    "for every level but `nvlink` and `node`.",
    # QoS classes
    "QoSClass.name": "The class's name, unique in the file (annotation "
    "`berth.dev/qos-class`).",
    "QoSClass.sm": "Share of the GPU's SMs a pod of the class uses alone.",
    "QoSClass.membw": "Share of the GPU's memory bandwidth a pod of the class uses alone.",
    "QoSClass.memoryMiB": "GPU memory a pod of the class typically uses, in MiB (its "
    "interference profile).",
    "QoSClass.latencySensitive": "Latency-sensitive: needs `soloLatencyMs` and `sloMs`; no "
    "placement whose predicted latency exceeds the SLO is made.",
    "QoSClass.soloLatencyMs": "Latency alone on a GPU, in milliseconds.",
    "QoSClass.sloMs": "The latency objective, in milliseconds; at least `soloLatencyMs`.",
    "QoSClass.exclusive": "Never share a GPU with another pod.",
    "QoSClass.noShareWith": "Classes it never shares a GPU with (declared under "
    "`qosClasses`).",
    # Batch, solver, release, admission
    "Batch.windowSeconds": "Every window the controller decides all pending gangs together.",
    "Batch.settleSeconds": "A batch also runs this long after a gated pod is created or a pod "
    "on a node ends, when nothing else arrived meanwhile, instead of waiting out the window; a "
    "burst closer together than this is still decided as one. 0: only at the window; otherwise "
    "at least 0.1, and a value at or above the window has no effect (docs/controller.md, "
    "\"When a batch runs\").",
    "Batch.gangTimeoutSeconds": "A gang whose pods have not all been created after this is "
    "reported on its pods (reason `GangTimedOut`); it keeps waiting.",
    "Batch.fastPathClasses": "QoS classes placed on arrival (greedy best-fit) instead of at "
    "the end of the window; declared under `qosClasses`.",
    "Batch.recordsSaveSeconds": "How often the leader saves what it remembers across windows "
    "(each tenant's GPU use and fair share over time, the learned target workload) to the "
    "ConfigMap `berth-records` in Berth's namespace, which a new leader reads back.",
    "SolverSettings.timeLimitSeconds": "CP-SAT stops here; the greedy plan stands if it "
    "found nothing better.",
    "SolverSettings.weights": "Weights of the objective's terms.",
    "SolverSettings.reservations": "Capacity held for gangs that cannot fit now, at their "
    "earliest expected start, which only gangs known to end before it may use (backfill). "
    "Expected ends come from pods' `activeDeadlineSeconds` (docs/reservations.md).",
    "Reservations.maxGangs": "Gangs that get a reservation per window; 0 turns reservations "
    "off.",
    "Reservations.afterSeconds": "A gang gets a reservation only after waiting this long.",
    "Reservations.horizonSeconds": "How far ahead a reserved start may lie.",
    "Reservations.holdAheadSeconds": (
        "Capacity is held for a reservation from this long before its planned start; until "
        "then other gangs may still use it (bench/reservations_sim.md: holding earlier idles "
        "GPUs that only gangs with a deadline could backfill)."),
    "Reservations.keep": (
        "A gang given a reservation keeps its place ahead of the queue until it starts: it "
        "ranks at least as high as every gang of its priority or lower, so only a gang of a "
        "higher priority class may push its start back; and its start is planned among "
        "every running pod's expected end, not a spread of 32 of them, so it is exact. Off: "
        "every window plans afresh, and a more urgent gang may take the reservation "
        "(docs/reservations.md, "
        "\"Keeping reservations\")."),
    "SolverSettings.reclaim": "A tenant whose waiting gang fits within its own quota takes "
    "GPUs back from tenants running on borrowed quota: whole gangs evicted through the "
    "Eviction API (PDBs respected), lowest priority first, then least run time lost "
    "(docs/reclaim.md).",
    "Reclaim.enabled": "Evict borrowed gangs for tenants waiting within their quota; off: "
    "quota lent stays lent until the borrower's pods end.",
    "Reclaim.minRuntimeSeconds": "A running gang is never reclaimed before every pod of it has "
    "run this long.",
    "Reclaim.maxGangsPerWindow": "Most gangs evicted per batch window (reclaim and "
    "preemption together); 0 evicts none.",
    "Reclaim.preemptWithinTenant": "A waiting gang may also evict running gangs of its own "
    "tenant of strictly lower priority (`berth.dev/priority`), whole and after "
    "`minRuntimeSeconds`, once no quota lent to other tenants is left to take back; on or off "
    "whatever `enabled` says. Another tenant's gang is never preempted by priority "
    "(docs/reclaim.md).",
    "SolverSettings.fairSharing": "Fair share judged over time: each tenant's held GPUs and "
    "its fair share are averaged with a half-life, and a tenant that got less than its share "
    "has its gangs moved up the queue (docs/fair-sharing.md).",
    "FairSharing.halfLifeSeconds": "Half-life of the averages; 0 turns fair sharing over time "
    "off (each window is judged alone). The record lives in the controller and starts over "
    "when the leader changes.",
    "SolverSettings.targetWorkload": "FGD's target workload (what free GPUs are judged "
    "against as fragments) learned from the pod shapes that arrived, each tenant's mixed by "
    "its weight (docs/fair-sharing.md).",
    "TargetWorkload.halfLifeSeconds": "Half-life of the learned shapes; 0: judge against the "
    "window's own pods only. The record lives in the controller and starts over when the "
    "leader changes.",
    "SolverSettings.learnedRuntimes": "Run times learned from finished pods: a running pod "
    "with no deadline and no `berth.dev/expected-runtime` is expected to run as long as the "
    "median of the last pods of its kind (its tenant, its owner's kind, its GPU count) that "
    "Berth released and that ended Succeeded. An estimate: it plans when a reservation's "
    "capacity frees, never lets a gang backfill (docs/reservations.md).",
    "LearnedRuntimes.enabled": "Learn run times and use them; off: pods that declare nothing "
    "have no expected end. Off by default (bench/reservations_sim.md, \"Run times learned "
    "from finished pods\").",
    "LearnedRuntimes.minSamples": "Finished pods of a kind before its run time is estimated.",
    "LearnedRuntimes.samples": "The last finished pods of each kind remembered (the median is "
    "over these); at least `minSamples`. The record lives in the controller: a new leader "
    "learns again from the finished pods the API server still holds.",
    "SolverSettings.queueing": "What orders the queue beyond priority, aging and fair "
    "share, and what the window's packing may not change of that order (docs/queueing.md).",
    "Queueing.shortRunBonus": "Priority points a gang gains for a short enforced run-time "
    "limit (every pod's own `activeDeadlineSeconds`, or Kueue's max-execution-time label with "
    "the kueue backend; never `berth.dev/expected-runtime`): in full at 0 s, falling linearly "
    "to none at `shortRunSeconds`; a gang without such a limit gains none. Short runs first; "
    "0 turns it off.",
    "Queueing.shortRunSeconds": "The run-time limit at and beyond which a gang gains no "
    "short-run bonus.",
    "Queueing.keepOrderAfterSeconds": "A gang that has waited this long and that best-fit in "
    "queue order would start in this window is started: the order search and CP-SAT may add "
    "gangs and choose nodes, never leave it waiting for a better packing. null turns it off.",
    "FairSharing.boost": "Priority points a tenant's gangs gain at a deficit of 100 % (it got "
    "nothing of its share), in proportion below; a tenant above its share gains nothing.",
    "ObjectiveWeights.demand": "Admitted priority-weighted GPU demand (the term the others "
    "are traded against).",
    "ObjectiveWeights.agingPerHour": "Priority a waiting gang gains per hour waited.",
    "ObjectiveWeights.fragmentation": "Penalty on free GPU shares left that the window's "
    "pods could not use (FGD's measure), in the model and in the order search, which keeps "
    "the pass with the most admitted demand less this weight times the cluster's expected "
    "fragmentation after it (never a pass admitting less than best-fit). 0 ranks passes by "
    "demand alone.",
    "ObjectiveWeights.topology": "Penalty per topology domain a gang spreads over beyond its "
    "first, at the level it prefers.",
    "ObjectiveWeights.fairness": "Reward for raising the smallest weighted dominant share "
    "among tenants with pending gangs.",
    "ObjectiveWeights.energy": "Penalty on waking idle GPUs, by their models' watts.",
    "ObjectiveWeights.interference": "Penalty on predicted slowdown next to pods already on "
    "a GPU.",
    "ObjectiveWeights.stay": "Cost per milli-GPU (plus 100 per pod) of placing a pod elsewhere "
    "than the order search placed it (the best of a best-fit and several FGD passes over the "
    "window); CP-SAT moves a pod only when another term gains more. Leaving the pod's gang out "
    "costs nothing: which gangs are admitted is for the demand, aging and fairness terms. 0 "
    "lets the model's own linearised fragmentation decide.",
    "Release.backend": "`standalone` (the default scheduler binds within Berth's placement), "
    "`kueue` (the tenant's LocalQueue, `tenants[].queues.kueue`) or `volcano` (its Queue, "
    "`tenants[].queues.volcano`).",
    "Admission.tenantMismatch": "A pod labelled for a tenant other than its namespace's: "
    "`refuse` it, or `overwrite` the label.",
    "Admission.maxPriority": "Highest `berth.dev/priority` a pod may ask for (the lowest "
    "is its negative), for every tenant without its own `limits.maxPriority`. Priority weighs "
    "a gang against every other tenant's waiting work, so it is bounded like any value a "
    "user may set.",
    "Admission.maxExpectedRuntimeSeconds": "Longest `berth.dev/expected-runtime` a pod may "
    "declare (60 s to a year; default a week); a longer or malformed one is refused at "
    "CREATE. The declared run time is an estimate: it only plans when a running pod's "
    "capacity frees, never lets a gang backfill (docs/reservations.md).",
    "Admission.requireGangSize": "Refuse gang pods whose size the pod itself does not "
    "state (Volcano, KAI and owner gangs).",
}


class _WithFactoryDefaults(GenerateJsonSchema):
    """pydantic leaves ``default_factory`` defaults out of the schema; an editor and the
    reference should show them (the default topology levels, the MIG profiles)."""

    def get_default_value(self, schema: core_schema.WithDefaultSchema) -> Any:
        factory = schema.get("default_factory")
        if factory is not None and not schema.get("default_factory_takes_data"):
            return factory()  # type: ignore[call-arg]
        return schema.get("default", NoDefault)


def _text(doc: str) -> str:
    """A docstring as one paragraph, RST literals as markdown ones."""
    return re.sub(r"\s+", " ", doc).strip().replace("``", "`")


def _models(root: type[BaseModel] = Policy) -> dict[str, type[BaseModel]]:
    """Every model class reachable from ``root``, by name (pydantic's ``$defs`` keys)."""
    found: dict[str, type[BaseModel]] = {}

    def visit(tp: object) -> None:
        if isinstance(tp, type) and issubclass(tp, BaseModel):
            if tp.__name__ in found:
                return
            found[tp.__name__] = tp
            for field in tp.model_fields.values():
                visit(field.annotation)
        for arg in getattr(tp, "__args__", ()) or ():
            visit(arg)

    visit(root)
    return found


def _field_docs() -> dict[str, str]:
    """Description of every field, keyed ``Class.yamlKey``: the model's own, else
    :data:`FIELD_DOCS`."""
    out: dict[str, str] = {}
    for name, model in _models().items():
        for attr, field in model.model_fields.items():
            key = f"{name}.{field.alias or attr}"
            doc = field.description or FIELD_DOCS.get(key)
            if doc:
                out[key] = _text(doc)
    return out


def missing_descriptions() -> list[str]:
    """``Class.yamlKey`` of every field with no description anywhere."""
    have = _field_docs()
    return [f"{name}.{f.alias or attr}" for name, model in _models().items()
            for attr, f in model.model_fields.items() if f"{name}.{f.alias or attr}" not in have]


def unknown_descriptions() -> list[str]:
    """Entries of :data:`FIELD_DOCS` that name no field (a renamed or removed one)."""
    fields = {f"{name}.{f.alias or attr}" for name, model in _models().items()
              for attr, f in model.model_fields.items()}
    return sorted(set(FIELD_DOCS) - fields)


def _nullable(prop: Json) -> None:
    """``anyOf: [{type: X, ...}, {type: null}]`` -> ``{type: [X, "null"], ...}``."""
    options = prop.get("anyOf")
    if not isinstance(options, list) or len(options) != 2 or {"type": "null"} not in options:
        return
    (other,) = [o for o in options if o != {"type": "null"}]
    if not isinstance(other.get("type"), str) or "$ref" in other:
        return
    del prop["anyOf"]
    prop.update({**other, "type": [other["type"], "null"]})


def _tidy(node: object) -> None:
    """Drop generated titles and flatten nullable types, everywhere below ``node``."""
    if isinstance(node, dict):
        props = node.get("properties")
        if isinstance(props, dict):
            for prop in props.values():
                prop.pop("title", None)
                _nullable(prop)
        for value in node.values():
            _tidy(value)
    elif isinstance(node, list):
        for value in node:
            _tidy(value)


def _rules(schema: Json) -> None:
    """The cross-field rules of the model and of refs.py that JSON Schema can say."""
    defs = schema["$defs"]
    if "QoSClass" in defs:  # QoSClass._latency
        defs["QoSClass"]["if"] = {"properties": {"latencySensitive": {"const": True}},
                                  "required": ["latencySensitive"]}
        defs["QoSClass"]["then"] = {
            "required": ["soloLatencyMs", "sloMs"],
            "properties": {"soloLatencyMs": {"type": "number"}, "sloMs": {"type": "number"}},
        }
    if "TopologyLevel" in defs:  # refs._topology
        defs["TopologyLevel"]["if"] = {"properties": {"name": {"not": {"enum": ["nvlink",
                                                                                "node"]}}}}
        defs["TopologyLevel"]["then"] = {"required": ["nodeLabel"],
                                         "properties": {"nodeLabel": {"type": "string"}}}
    queued = []  # refs._tenant_refs: a backend with queues needs each tenant's queue
    for name, backend in BACKENDS.items():
        if backend.queue_kind:
            queued.append({
                "if": {"properties": {"release": {"properties": {"backend": {"const": name}},
                                                  "required": ["backend"]}},
                       "required": ["release"]},
                "then": {"properties": {"tenants": {"items": {
                    "properties": {"queues": {"properties": {name: {"type": "string"}},
                                              "required": [name]}},
                    "required": ["queues"]}}}},
            })
    if queued:
        schema["allOf"] = queued


def policy_schema() -> Json:
    """The policy's JSON Schema (draft 2020-12), as written to :data:`SCHEMA_FILE`."""
    raw = Policy.model_json_schema(by_alias=True, mode="validation",
                                   schema_generator=_WithFactoryDefaults)
    raw = copy.deepcopy(raw)
    docs = _field_docs()
    models = _models()
    defs: Json = raw.pop("$defs", {})
    root_props = raw.pop("properties")
    for where, name in [*((defs[n], n) for n in defs), (raw, "Policy")]:
        props = root_props if name == "Policy" else where.get("properties", {})
        for key, prop in props.items():
            doc = docs.get(f"{name}.{key}")
            if doc and "description" not in prop:
                prop["description"] = doc
            # a whole section's default repeats its fields' own defaults
            if "$ref" in prop and isinstance(prop.get("default"), dict):
                del prop["default"]
        if name in models and where.get("description"):
            where["description"] = _text(where["description"])
    raw.pop("title", None)
    raw.pop("description", None)
    schema: Json = {
        "$schema": DRAFT,
        "$id": SCHEMA_ID,
        "title": f"Berth policy ({API_VERSION})",
        "description": "The cluster admin's policy file for Berth, the batch admission "
        "controller for multi-tenant GPU clusters. `berth policy check FILE` checks "
        "everything this schema checks and the cross-references it cannot (names a tenant "
        "or class uses must be declared, a namespace belongs to one tenant, the fraction "
        "grid fits the sharing backend). Generated from admission/policy/model.py by "
        "`berth docs`.",
        **raw,
        "properties": root_props,
        "$defs": defs,
    }
    _tidy(schema)
    _rules(schema)
    return schema


def render_schema() -> str:
    """:func:`policy_schema` as the text of :data:`SCHEMA_FILE`."""
    return json.dumps(policy_schema(), indent=2, ensure_ascii=False) + "\n"


# --------------------------------------------------------------------------------------------
# The field table of docs/reference/policy.md, read from the schema so the two agree.
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class FieldRow:
    path: str  # "tenants[].quota.gpus"
    type: str
    required: bool
    default: str  # "" when the field has none
    bounds: str
    description: str


def _resolve(schema: Json, node: Json) -> Json:
    ref = node.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/$defs/"):
        return dict(schema["$defs"][ref.removeprefix("#/$defs/")])
    return node


def _num(value: object) -> str:
    return f"{value:g}" if isinstance(value, float) else json.dumps(value)


def _bounds(node: Json) -> list[str]:
    out = []
    for key, sign in (("minimum", "≥"), ("exclusiveMinimum", ">"), ("maximum", "≤"),
                      ("exclusiveMaximum", "<")):
        if key in node:
            out.append(f"{sign} {_num(node[key])}")
    if node.get("minLength") == 1 and "maxLength" not in node:
        out.append("non-empty")
    elif "minLength" in node or "maxLength" in node:
        out.append(f"{node.get('minLength', 0)}–{node.get('maxLength', '∞')} characters")
    if "pattern" in node:
        out.append(f"matches `{node['pattern']}`")
    if "minItems" in node:
        n = node["minItems"]
        out.append(f"at least {n} item{'s' if n != 1 else ''}")
    if "maxItems" in node:
        out.append(f"at most {node['maxItems']} items")
    return out


def _type(schema: Json, node: Json, plural: bool = False) -> str:
    node = _resolve(schema, node)
    if "const" in node:
        return f"`{node['const']}`"
    if "enum" in node:
        return "one of " + ", ".join(f"`{v}`" for v in node["enum"])
    kind = node.get("type")
    if isinstance(kind, list):
        kinds = [k for k in kind if k != "null"]
        return " or ".join(kinds)
    if kind == "array":
        return f"list of {_type(schema, node.get('items', {}), plural=True)}"
    if kind == "object" and "properties" in node:
        return "objects" if plural else "object"
    name = str(kind or "any")
    return f"{name}s" if plural and name in ("string", "number", "integer", "boolean") else name


def _default(prop: Json) -> str:
    if "default" not in prop:
        return ""
    value = prop["default"]
    if value is None:
        return "unset"
    if isinstance(value, str):
        return f"`{value}`"
    text = _num(value) if not isinstance(value, list | dict) else json.dumps(value)
    if len(text) > 40:
        return f"{len(value)} entries (below)"
    return f"`{text}`"


def field_rows(schema: Json | None = None) -> list[FieldRow]:
    """Every field of the policy, depth first in file order."""
    schema = schema if schema is not None else policy_schema()
    rows: list[FieldRow] = []

    def walk(node: Json, prefix: str) -> None:
        node = _resolve(schema, node)
        required = set(node.get("required", ()))
        for key, prop in node.get("properties", {}).items():
            path = f"{prefix}.{key}" if prefix else key
            target = _resolve(schema, prop)
            items = _resolve(schema, target.get("items", {})) if target.get(
                "type") == "array" else {}
            bounds = ", ".join(_bounds(target))
            item_bounds = ", ".join(_bounds(items)) if "properties" not in items else ""
            if item_bounds:
                bounds = f"{bounds}; each {item_bounds}" if bounds else f"each {item_bounds}"
            rows.append(FieldRow(path, _type(schema, prop), key in required, _default(prop),
                                 bounds, prop.get("description", "")))
            if "properties" in target:
                walk(target, path)
            elif "properties" in items:
                walk(items, f"{path}[]")

    walk(schema, "")
    return rows


def factory_defaults(schema: Json | None = None) -> dict[str, Any]:
    """Defaults too long for the table (lists of objects), by path, shown under it."""
    schema = schema if schema is not None else policy_schema()
    out: dict[str, Any] = {}

    def walk(node: Json, prefix: str) -> None:
        node = _resolve(schema, node)
        for key, prop in node.get("properties", {}).items():
            path = f"{prefix}.{key}" if prefix else key
            if _default(prop).endswith("(below)"):
                out[path] = prop["default"]
            target = _resolve(schema, prop)
            if "properties" in target:
                walk(target, path)
            elif target.get("type") == "array" and "properties" in _resolve(
                    schema, target.get("items", {})):
                walk(target["items"], f"{path}[]")

    walk(schema, "")
    return out
