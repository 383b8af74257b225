"""Checks that relate several parts of the policy file to each other.

They read the raw YAML data, not the validated model, so that they run even when another part
of the file is malformed: the admin sees every mistake in one pass. Values of the wrong type
are skipped here; the model's validation reports those.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from admission.backends import BACKENDS, BackendName
from admission.policy.model import DEFAULT_MAX_PRIORITY, PRIORITY_LIMIT

Path = tuple[str | int, ...]
RefError = tuple[Path, str]


def _items(data: object, key: str) -> Iterator[tuple[int, dict[str, Any]]]:
    """(index, mapping) for each mapping in the list ``data[key]``."""
    seq = data.get(key) if isinstance(data, dict) else None
    if isinstance(seq, list):
        for i, item in enumerate(seq):
            if isinstance(item, dict):
                yield i, item


def _strings(data: object, key: str) -> Iterator[tuple[int, str]]:
    seq = data.get(key) if isinstance(data, dict) else None
    if isinstance(seq, list):
        for i, item in enumerate(seq):
            if isinstance(item, str):
                yield i, item


def _section(data: object, key: str) -> dict[str, Any]:
    value = data.get(key) if isinstance(data, dict) else None
    return value if isinstance(value, dict) else {}


def _unique_names(data: object, key: str, what: str) -> tuple[list[RefError], set[str]]:
    errors: list[RefError] = []
    seen: dict[str, int] = {}
    for i, item in _items(data, key):
        name = item.get("name")
        if not isinstance(name, str):
            continue
        if name in seen:
            also = f"{key}[{seen[name]}]"
            errors.append(((key, i, "name"), f"duplicate {what} {name!r} (also {also})"))
        else:
            seen[name] = i
    return errors, set(seen)


def check_references(data: object) -> list[RefError]:
    """Every cross-reference error in the raw policy ``data``, each with its path."""
    errors: list[RefError] = []
    errs, _tenants = _unique_names(data, "tenants", "tenant")
    errors += errs
    errs, models = _unique_names(data, "gpuModels", "GPU model")
    errors += errs
    errs, classes = _unique_names(data, "qosClasses", "QoS class")
    errors += errs
    errors += _topology(data)
    errors += _tenant_refs(data, models, classes)
    errors += _qos_refs(data, classes)
    errors += _sharing(data)
    errors += _priorities(data)
    return errors


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _priorities(data: object) -> list[RefError]:
    """A tenant's default priority lies within its priority bound (limits.maxPriority, else
    admission.maxPriority): the bound the webhook holds every pod of the tenant to."""
    default = _int(_section(data, "admission").get("maxPriority", DEFAULT_MAX_PRIORITY))
    errors: list[RefError] = []
    for i, tenant in _items(data, "tenants"):
        priority = _int(tenant.get("priority", 0))
        own = _section(tenant, "limits").get("maxPriority")
        bound, where = ((_int(own), f"tenants[{i}].limits.maxPriority") if own is not None
                        else (default, "admission.maxPriority"))
        if (priority is None or bound is None or not 0 <= bound <= PRIORITY_LIMIT
                or -bound <= priority <= bound or abs(priority) > PRIORITY_LIMIT):
            continue  # a value of the wrong type or beyond every bound is the model's to report
        errors.append((("tenants", i, "priority"),
                       f"{priority} is outside the tenant's priority bound -{bound}..{bound} "
                       f"({where}); lower it or raise the bound"))
    return errors


def _topology(data: object) -> list[RefError]:
    errors: list[RefError] = []
    seen: set[str] = set()
    for i, level in _items(_section(data, "topology"), "levels"):
        name = level.get("name")
        if not isinstance(name, str):
            continue
        path: Path = ("topology", "levels", i)
        if name in seen:
            errors.append(((*path, "name"), f"duplicate topology level {name!r}"))
        seen.add(name)
        if name not in ("nvlink", "node") and not level.get("nodeLabel"):
            errors.append(
                ((*path, "nodeLabel"),
                 f"level {name!r} needs the node label that holds it, "
                 "e.g. nodeLabel: topology.kubernetes.io/rack")
            )
    return errors


def _tenant_refs(data: object, models: set[str], classes: set[str]) -> list[RefError]:
    errors: list[RefError] = []
    owner: dict[str, str] = {}
    named = _section(data, "release").get("backend", BackendName.STANDALONE)
    backend = BACKENDS.get(named) if isinstance(named, str) else None  # else the model says
    for i, tenant in _items(data, "tenants"):
        name = tenant.get("name", f"#{i}")
        for j, ns in _strings(tenant, "namespaces"):
            if ns in owner and owner[ns] != name:
                errors.append(
                    (("tenants", i, "namespaces", j),
                     f"namespace {ns!r} already belongs to tenant {owner[ns]!r}; "
                     "a namespace maps to exactly one tenant")
                )
            owner.setdefault(ns, str(name))
        if models:
            for j, model in _strings(tenant, "allowedModels"):
                if model not in models:
                    errors.append(
                        (("tenants", i, "allowedModels", j),
                         f"unknown GPU model {model!r}; declare it under gpuModels "
                         f"(known: {', '.join(sorted(models))})")
                    )
        for j, qos in _strings(tenant, "allowedQosClasses"):
            if qos not in classes:
                errors.append(
                    (("tenants", i, "allowedQosClasses", j), _unknown_class(qos, classes))
                )
        default = tenant.get("defaultQosClass")
        if isinstance(default, str) and default not in classes:
            errors.append((("tenants", i, "defaultQosClass"), _unknown_class(default, classes)))
        allowed = [q for _, q in _strings(tenant, "allowedQosClasses")]
        if isinstance(default, str) and default in classes and allowed and default not in allowed:
            errors.append((("tenants", i, "defaultQosClass"),
                           f"{default!r} is not among the tenant's allowedQosClasses "
                           f"({', '.join(allowed)}): every pod without a class would be refused; "
                           "add it there or pick one of them"))
        if backend is not None and backend.queue_kind:
            queues = tenant.get("queues")
            if not (isinstance(queues, dict) and queues.get(backend.name)):
                errors.append(
                    (("tenants", i, "queues", backend.name.value),
                     f"required when release.backend is {backend.name}: name the tenant's "
                     f"{backend.queue_kind}")
                )
    return errors


def _unknown_class(name: str, classes: set[str]) -> str:
    known = ", ".join(sorted(classes)) or "none declared"
    return f"unknown QoS class {name!r}; declare it under qosClasses (known: {known})"


def _qos_refs(data: object, classes: set[str]) -> list[RefError]:
    errors: list[RefError] = []
    for i, qos in _items(data, "qosClasses"):
        for j, other in _strings(qos, "noShareWith"):
            if other not in classes:
                errors.append((("qosClasses", i, "noShareWith", j), _unknown_class(other, classes)))
    for j, cls in _strings(_section(data, "batch"), "fastPathClasses"):
        if cls not in classes:
            errors.append((("batch", "fastPathClasses", j), _unknown_class(cls, classes)))
    return errors


def _sharing(data: object) -> list[RefError]:
    sharing = _section(data, "sharing")
    grid = [
        (j, v) for j, v in enumerate(sharing.get("fractionGrid") or [])
        if isinstance(v, int | float) and not isinstance(v, bool) and 0 < v <= 1
    ] if isinstance(sharing.get("fractionGrid"), list) else []
    errors: list[RefError] = []
    values = [v for _, v in grid]
    if values and values != sorted(set(values)):
        errors.append((("sharing", "fractionGrid"), "must be strictly increasing, no repeats"))
    backend = sharing.get("backend", "none")
    if backend == "time-slicing":
        replicas = _section(sharing, "timeSlicing").get("replicas", 4)
        if isinstance(replicas, int) and replicas > 0:
            for j, v in grid:
                slots = v * replicas
                if abs(slots - round(slots)) > 1e-9:
                    errors.append(
                        (("sharing", "fractionGrid", j),
                         f"{v} x {replicas} replicas is {slots:g} time-slicing slots; "
                         f"use multiples of 1/{replicas}")
                    )
    if backend == "mig":
        mig = _section(sharing, "mig")
        profiles = mig.get("profiles") if "profiles" in mig else None
        if isinstance(profiles, list):
            fractions = [p.get("fraction") for p in profiles if isinstance(p, dict)]
            biggest = max((f for f in fractions if isinstance(f, int | float)), default=1.0)
            for j, v in grid:
                if v > biggest + 1e-9 and v < 1:
                    errors.append(
                        (("sharing", "fractionGrid", j),
                         f"no MIG profile holds a {v} share (largest {biggest:.3g})")
                    )
    return errors
