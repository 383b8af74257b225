"""GPU demand read from Dynamic Resource Allocation claims (``resource.k8s.io/v1``).

A pod asks for DRA devices in ``spec.resourceClaims``: each entry names a ResourceClaim of its
namespace (``resourceClaimName``) or a ResourceClaimTemplate the claim is made from
(``resourceClaimTemplateName``). A claim's ``spec.devices.requests`` each ask for devices of
one DeviceClass. The requests Berth plans are those of the GPU classes (whole GPUs) and the MIG
classes (one MIG device each) named by :class:`Classes`; requests of any other class (network
cards, ...) are not GPUs and Berth leaves them to the scheduler.

What Berth reads of a GPU request, and what it refuses with the field and the fix, because
planning it would place the pod on a node where the scheduler's allocator may find no device
(a pod of a gang pinned there would leave the gang half bound):

- ``exactly.count`` with ``allocationMode: ExactCount`` (the default, count 1): read;
  ``allocationMode: All`` refused (ask for a count);
- ``exactly.selectors``: CEL expressions naming the GPU model
  (``device.attributes["gpu.nvidia.com"].productName == "..."``, or ``in [...]``, joined by
  ``||``; the name as GPU Feature Discovery writes it, spaces as dashes, is what the policy's
  models are compared with), a MIG device's ``profile`` the same way, and the driver test
  ``device.driver == "gpu.nvidia.com"``; any other expression is refused, naming the forms
  Berth reads;
- ``exactly.adminAccess: true`` refused (it reaches devices other pods use);
- ``exactly.capacity.requests.memory`` (consumable capacity, Kubernetes 1.36+): a share of one
  GPU holding that much of its memory, on a device the driver lets several claims share
  (``allowMultipleAllocations``); read with ``count`` 1, for the GPU classes only (a MIG
  device is a share already), and no other capacity is read (refused, naming it);
- ``firstAvailable`` (alternatives) refused: ask for one class;
- ``spec.devices.constraints`` on a GPU request refused.

Pure: the claims and templates come in as API JSON; nothing here talks to the API server.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from admission import constants as c
from admission.dra.slices import model_name, quantity_mib

Obj = Mapping[str, Any]

#: At most this many devices in one request and this many requests in one claim: a count of
#: GPUs on one pod beyond any node is not a real request; the policy's maxGpusPerPod bounds it.
MAX_COUNT = 4096
MAX_REQUESTS = 32
MAX_POD_CLAIMS = 32
MAX_SELECTOR = 4096  # characters of one CEL expression Berth will read

TEMPLATE = "ResourceClaimTemplate"
CLAIM = "ResourceClaim"


class ClaimProblem(ValueError):
    """A field Berth cannot accept: ``path`` names it (from the pod, the claim or the
    template), ``message`` says the fix, ``reason`` is the short code for metrics."""

    def __init__(self, path: str, message: str, reason: str = "dra") -> None:
        super().__init__(f"{path}: {message}")
        self.path = path
        self.message = message
        self.reason = reason


@dataclass(frozen=True, slots=True)
class Classes:
    """Which DeviceClasses are GPUs to Berth, and the driver whose attributes name models.
    The defaults are those of NVIDIA's DRA driver."""

    gpu: frozenset[str] = frozenset({c.DRA_GPU_CLASS})
    mig: frozenset[str] = frozenset({c.DRA_MIG_CLASS})
    driver: str = c.DRA_DRIVER

    def is_gpu(self, name: str) -> bool:
        return name in self.gpu or name in self.mig


DEFAULT_CLASSES = Classes()


@dataclass(frozen=True, slots=True)
class ClaimRef:
    """One entry of a pod's ``spec.resourceClaims``."""

    name: str  # the pod's name for the claim
    kind: str  # TEMPLATE or CLAIM
    object: str  # the template's or claim's name, in the pod's namespace
    path: str  # the field, for messages


@dataclass(frozen=True, slots=True)
class GpuAsk:
    """What one claim asks of GPUs: ``count`` whole GPUs of any of ``models`` (empty: any),
    and ``mig`` MIG devices (one entry per device: its profile, or "" for any). With
    ``memory_mib``, ``count`` is 1 and the claim asks for a share of one GPU holding that much
    of its memory (consumable capacity)."""

    count: int = 0
    models: frozenset[str] = frozenset()
    mig: tuple[str, ...] = ()
    memory_mib: int = 0

    @property
    def empty(self) -> bool:
        return not self.count and not self.mig


@dataclass(frozen=True, slots=True)
class PodAsk:
    """A pod's GPU demand through DRA: whole GPUs and MIG devices summed over its claims,
    the models every claim allows (intersected), and the claims that ask for GPUs; or, with
    ``memory_mib``, a share of one GPU by consumable capacity (``count`` 1)."""

    count: int
    models: frozenset[str]
    mig: tuple[str, ...]
    claims: tuple[ClaimRef, ...]  # the pod's claims that ask for GPUs (templates and claims)
    memory_mib: int = 0

    @property
    def devices(self) -> int:
        return self.count + len(self.mig)


def _mapping(value: object, path: str) -> Obj:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ClaimProblem(path, f"must be a mapping, got {type(value).__name__}", "malformed")
    return value


def _list(value: object, path: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise ClaimProblem(path, f"must be a list, got {type(value).__name__}", "malformed")
    return value


def _name(value: object, path: str) -> str:
    if not isinstance(value, str) or not value or len(value) > 253:
        raise ClaimProblem(path, "must be a non-empty name of at most 253 characters",
                           "malformed")
    return value


def pod_claims(pod: Obj) -> list[ClaimRef]:
    """The pod's ``spec.resourceClaims``, each naming a claim or a template (one of them)."""
    spec = _mapping(pod.get("spec"), "spec")
    entries = _list(spec.get("resourceClaims"), "spec.resourceClaims")
    if len(entries) > MAX_POD_CLAIMS:
        raise ClaimProblem("spec.resourceClaims",
                           f"has {len(entries)} entries; Berth reads at most {MAX_POD_CLAIMS}",
                           "malformed")
    refs: list[ClaimRef] = []
    for i, raw in enumerate(entries):
        path = f"spec.resourceClaims[{i}]"
        entry = _mapping(raw, path)
        name = _name(entry.get("name"), f"{path}.name")
        claim, template = entry.get("resourceClaimName"), entry.get("resourceClaimTemplateName")
        if (claim is None) == (template is None):
            raise ClaimProblem(path, "must name exactly one of resourceClaimName and "
                                     "resourceClaimTemplateName", "malformed")
        if template is not None:
            field = f"{path}.resourceClaimTemplateName"
            refs.append(ClaimRef(name, TEMPLATE, _name(template, field), field))
        else:
            refs.append(ClaimRef(name, CLAIM, _name(claim, f"{path}.resourceClaimName"),
                                 f"{path}.resourceClaimName"))
    return refs


def claim_spec(obj: Obj, kind: str) -> Obj:
    """The ResourceClaimSpec of a claim (``spec``) or of a template (``spec.spec``)."""
    spec = _mapping(obj.get("spec"), "spec")
    return _mapping(spec.get("spec"), "spec.spec") if kind == TEMPLATE else spec


def capacity_requests(claim: Obj) -> set[str]:
    """Names of the ResourceClaim's requests that ask for capacity (a share by consumable
    capacity); empty for anything it cannot read."""
    spec = claim.get("spec")
    devices = spec.get("devices") if isinstance(spec, dict) else None
    requests = devices.get("requests") if isinstance(devices, dict) else None
    return {str(r.get("name")) for r in requests or [] if isinstance(r, dict)
            and isinstance(r.get("exactly"), dict) and r["exactly"].get("capacity") is not None}


# --------------------------------------------------------------------------- CEL selectors
_STR = r'"((?:[^"\\]|\\.)*)"|\'((?:[^\'\\]|\\.)*)\''
#: The device attributes a selector may test: the GPU model, and a MIG device's profile.
ATTRIBUTES = ("productName", "profile")
_ATTR = (r'device\.attributes\[\s*(?:"{d}"|\'{d}\')\s*\]\s*(?:\.\s*({a})|'
         r'\[\s*(?:"({a})"|\'({a})\')\s*\])')


def _unquote(m: re.Match[str], first: int) -> str:
    raw = m.group(first) if m.group(first) is not None else m.group(first + 1)
    return re.sub(r"\\(.)", r"\1", raw)


def _attribute(m: re.Match[str]) -> str:
    return next(g for g in m.groups()[:3] if g)


def _selector(expression: str, driver: str, path: str) -> dict[str, frozenset[str]]:
    """The values a CEL selector allows, per attribute of :data:`ATTRIBUTES` it tests (an
    attribute it does not test is absent: any value)."""
    if len(expression) > MAX_SELECTOR:
        raise ClaimProblem(path, f"is {len(expression)} characters; Berth reads selectors of "
                                 f"at most {MAX_SELECTOR}", "selector")
    found = _parse_selector(expression, driver)
    if isinstance(found, str):
        raise ClaimProblem(path, found, "selector")
    return dict(found)


@functools.lru_cache(maxsize=1024)
def _patterns(driver: str) -> tuple[re.Pattern[str], ...]:
    d = re.escape(driver)
    attr = _ATTR.format(d=d, a="|".join(ATTRIBUTES))
    return (re.compile(rf'\s*device\.driver\s*==\s*(?:"{d}"|\'{d}\')\s*'),
            re.compile(rf"\s*{attr}\s*==\s*(?:{_STR})\s*"),
            re.compile(rf"\s*{attr}\s+in\s+\[((?:\s*(?:{_STR})\s*,?)*)\]\s*"),
            re.compile(_STR))


@functools.lru_cache(maxsize=1024)
def _parse_selector(expression: str, driver: str
                    ) -> tuple[tuple[str, frozenset[str]], ...] | str:
    """:func:`_selector`'s reading, kept per expression (a template's selectors are the same
    for every pod made from it): the allowed values per attribute, or the refusal's text."""
    driver_test, equal, member, item = _patterns(driver)
    allowed: dict[str, frozenset[str]] = {}
    for conj in _split(_strip_parens(expression), "&&"):
        if driver_test.fullmatch(conj):
            continue
        found: dict[str, set[str]] = {}
        for alt in _split(_strip_parens(conj), "||"):
            alt = _strip_parens(alt)
            if m := equal.fullmatch(alt):
                found.setdefault(_attribute(m), set()).add(_unquote(m, 4))
            elif m := member.fullmatch(alt):
                found.setdefault(_attribute(m), set()).update(
                    _unquote(x, 1) for x in item.finditer(m.group(4)))
            else:
                found = {}
                break
        if len(found) != 1:  # unreadable, or an || across two attributes
            return (f"is a selector Berth cannot plan ({_short(expression)}); Berth reads "
                    f'device.attributes["{driver}"].productName == "<model>" (or in '
                    f'["<model>", ...]), the same of .profile for MIG devices, joined by || or '
                    f'&&, and device.driver == "{driver}"')
        (key, values), = found.items()
        allowed[key] = frozenset(values) if key not in allowed else allowed[key] & values
    return tuple(allowed.items())


def _short(text: str, limit: int = 80) -> str:
    text = " ".join(text.split())
    return repr(text if len(text) <= limit else text[:limit] + "...")


def _outside_quotes(text: str) -> tuple[list[tuple[int, int]], bool]:
    """(index, nesting depth) of every character outside string literals, and whether the
    text ends inside one; a backslash escapes the next character of a literal."""
    out: list[tuple[int, int]] = []
    depth, quote, i = 0, "", 0
    while i < len(text):
        ch = text[i]
        if quote:
            if ch == "\\":
                i += 1
            elif ch == quote:
                quote = ""
        elif ch in "\"'":
            quote = ch
        else:
            if ch in ")]":
                depth -= 1
            out.append((i, depth))
            if ch in "([":
                depth += 1
        i += 1
    return out, bool(quote)


def _balanced(text: str) -> bool:
    """Whether parentheses and brackets outside literals pair up (never closing early)."""
    chars, open_quote = _outside_quotes(text)
    depth = min((d for _, d in chars), default=0)
    ends = chars[-1][1] + (text[chars[-1][0]] in "([") if chars else 0
    return not open_quote and depth >= 0 and ends == 0


def _strip_parens(text: str) -> str:
    text = text.strip()
    while text.startswith("(") and text.endswith(")") and _balanced(text[1:-1]):
        text = text[1:-1].strip()
    return text


def _split(text: str, op: str) -> list[str]:
    """``text`` split at ``op`` outside literals, brackets and parentheses."""
    parts, start = [], 0
    for i, depth in _outside_quotes(text)[0]:
        if depth == 0 and i >= start and text.startswith(op, i):
            parts.append(text[start:i])
            start = i + len(op)
    parts.append(text[start:])
    return parts


# --------------------------------------------------------------------------- requests
def _count(raw: object, path: str) -> int:
    if raw is None:
        return 1
    if isinstance(raw, int) and not isinstance(raw, bool) and 1 <= raw <= MAX_COUNT:
        return raw
    raise ClaimProblem(path, f"must be a whole number from 1 to {MAX_COUNT}, got {raw!r:.40}",
                       "count")


def gpu_ask(spec: Obj, where: str, classes: Classes = DEFAULT_CLASSES) -> GpuAsk:
    """What the ResourceClaimSpec ``spec`` asks of GPUs (``where``: the field it sits at, for
    messages). Requests of other classes are not GPUs and are ignored."""
    devices = _mapping(spec.get("devices"), f"{where}.devices")
    requests = _list(devices.get("requests"), f"{where}.devices.requests")
    if len(requests) > MAX_REQUESTS:
        raise ClaimProblem(f"{where}.devices.requests",
                           f"has {len(requests)} requests; Berth reads at most {MAX_REQUESTS}",
                           "malformed")
    count, gpu_requests, memory = 0, [], 0
    mig: list[str] = []
    models: frozenset[str] | None = None
    for i, raw in enumerate(requests):
        path = f"{where}.devices.requests[{i}]"
        req = _mapping(raw, path)
        name = req.get("name")
        first = req.get("firstAvailable")
        exactly = _mapping(req.get("exactly"), f"{path}.exactly")
        if first is not None:
            for j, sub in enumerate(_list(first, f"{path}.firstAvailable")):
                cls = _mapping(sub, f"{path}.firstAvailable[{j}]").get("deviceClassName")
                if isinstance(cls, str) and classes.is_gpu(cls):
                    raise ClaimProblem(f"{path}.firstAvailable",
                                       "lists alternatives; Berth plans one device class per "
                                       "GPU request: ask for GPUs with exactly", "first-available")
            continue
        cls = exactly.get("deviceClassName")
        if not isinstance(cls, str) or not classes.is_gpu(cls):
            continue
        gpu_requests.append(name)
        mode = exactly.get("allocationMode") or "ExactCount"
        if mode != "ExactCount":
            raise ClaimProblem(f"{path}.exactly.allocationMode",
                               f"is {mode!r:.40}; Berth plans a number of GPUs: use ExactCount "
                               "with a count", "allocation-mode")
        if exactly.get("adminAccess"):
            raise ClaimProblem(f"{path}.exactly.adminAccess",
                               "gives access to devices other pods hold; tenants' pods may not "
                               "ask for it", "admin-access")
        n = _count(exactly.get("count"), f"{path}.exactly.count")
        if exactly.get("capacity") is not None:
            if cls in classes.mig:
                raise ClaimProblem(f"{path}.exactly.capacity",
                                   "asks for a share of a MIG device, which is a share of its "
                                   "GPU already; drop capacity and name the MIG profile",
                                   "capacity")
            if n != 1 or memory or count or mig:
                raise ClaimProblem(f"{path}.exactly.capacity",
                                   "asks for a share of a GPU with other GPUs in one claim; a "
                                   "share by capacity is one device (count 1) and the claim's "
                                   "only GPU request", "capacity")
            memory = _capacity_memory(exactly["capacity"], f"{path}.exactly.capacity",
                                      classes.driver)
        allowed: dict[str, frozenset[str]] = {}
        for j, sel in enumerate(_list(exactly.get("selectors"), f"{path}.exactly.selectors")):
            spath = f"{path}.exactly.selectors[{j}].cel.expression"
            cel = _mapping(_mapping(sel, f"{path}.exactly.selectors[{j}]").get("cel"),
                           f"{path}.exactly.selectors[{j}].cel")
            expr = cel.get("expression")
            if not isinstance(expr, str):
                raise ClaimProblem(spath, "must be a CEL expression (a string)", "selector")
            for key, values in _selector(expr, classes.driver, spath).items():
                if key == "productName":
                    values = frozenset(model_name(v) for v in values)
                allowed[key] = values if key not in allowed else allowed[key] & values
        if any(not v for v in allowed.values()):
            raise ClaimProblem(f"{path}.exactly.selectors",
                               "allow no device at all (their values do not overlap)",
                               "selector")
        if "productName" in allowed:
            models = allowed["productName"] if models is None else models & allowed["productName"]
            if not models:
                raise ClaimProblem(f"{path}.exactly.selectors",
                                   "allow no model that the claim's other GPU requests allow; "
                                   "one pod's GPUs are planned on one node", "selector")
        if cls in classes.mig:
            profiles = allowed.get("profile", frozenset())
            if len(profiles) > 1:
                raise ClaimProblem(f"{path}.exactly.selectors",
                                   f"allow {len(profiles)} MIG profiles; name one", "selector")
            mig += [next(iter(profiles), "")] * n
        elif "profile" in allowed:
            raise ClaimProblem(f"{path}.exactly.selectors",
                               f"test a MIG profile, but class {cls} hands out whole GPUs; ask "
                               f"for MIG devices with class {sorted(classes.mig)[0]}", "selector")
        else:
            count += n
    if memory and (count != 1 or mig):
        raise ClaimProblem(f"{where}.devices.requests",
                           "ask for GPUs next to a share of a GPU by capacity; a share by "
                           "capacity is the claim's only GPU request", "capacity")
    if gpu_requests:
        for i, raw in enumerate(_list(devices.get("constraints"), f"{where}.devices.constraints")):
            cons = _mapping(raw, f"{where}.devices.constraints[{i}]")
            names = cons.get("requests")
            if names is None or set(_list(names, "requests")) & set(gpu_requests):
                raise ClaimProblem(f"{where}.devices.constraints[{i}]",
                                   "constrains GPU requests, which Berth cannot plan; drop the "
                                   "constraint (Berth keeps a pod's GPUs on one node and its "
                                   "gang together by the policy's topology)", "constraints")
    return GpuAsk(count=count, models=models or frozenset(), mig=tuple(mig), memory_mib=memory)


def _capacity_memory(raw: object, path: str, driver: str) -> int:
    """MiB of GPU memory a request's ``capacity`` asks for (rounded up to whole MiB)."""
    cap = _mapping(raw, path)
    requests = _mapping(cap.get("requests"), f"{path}.requests")
    names = ("memory", f"{driver}/memory")
    for key in requests:
        if key not in names:
            raise ClaimProblem(f"{path}.requests[{str(key)[:63]}]",
                               "is a capacity Berth does not plan; a share of a GPU is asked "
                               "for by its memory (capacity.requests.memory)", "capacity")
    found = [requests[k] for k in names if k in requests]
    if len(found) != 1:
        raise ClaimProblem(f"{path}.requests", "must ask for the GPU's memory once "
                                               "(memory: 40Gi)", "capacity")
    mib = quantity_mib(found[0], up=True)
    if mib <= 0:
        raise ClaimProblem(f"{path}.requests.memory",
                           f"must be a positive quantity of memory such as 40Gi, got "
                           f"{found[0]!r:.40}", "capacity")
    return mib


def pod_ask(pod: Obj, lookup: Mapping[tuple[str, str], Obj | None],
            classes: Classes = DEFAULT_CLASSES) -> PodAsk | None:
    """The pod's GPU demand through its claims, or None when none asks for GPUs. ``lookup``
    maps (kind, name) to the claim or template object of the pod's namespace, None when it
    does not exist (refused: Berth cannot know what it asks)."""
    count, asking, memory = 0, [], 0
    mig: list[str] = []
    models: frozenset[str] | None = None
    for ref in pod_claims(pod):
        obj = lookup.get((ref.kind, ref.object))
        if obj is None:
            raise ClaimProblem(ref.path, f"{ref.kind} {ref.object!r} does not exist in the pod's "
                                         "namespace; create it before the pod", "missing")
        where = f"{ref.kind} {ref.object}: spec" + (".spec" if ref.kind == TEMPLATE else "")
        ask = gpu_ask(claim_spec(obj, ref.kind), where, classes)
        if ask.empty:
            continue
        asking.append(ref)
        if ask.memory_mib or memory:
            if asking[:-1]:
                raise ClaimProblem(ref.path, "asks for GPUs next to a share of a GPU by capacity "
                                             "in another claim; a pod takes whole GPUs or one "
                                             "share", "capacity")
            memory = ask.memory_mib
        count += ask.count
        mig += ask.mig
        if ask.models:
            models = ask.models if models is None else models & ask.models
            if not models:
                raise ClaimProblem(ref.path, "asks for GPU models no other claim of the pod "
                                             "allows; one pod's GPUs are planned on one node",
                                   "selector")
    if not asking:
        return None
    if count > MAX_COUNT:
        raise ClaimProblem("spec.resourceClaims", f"ask for {count} GPUs in all", "count")
    return PodAsk(count=count, models=models or frozenset(), mig=tuple(mig),
                  claims=tuple(asking), memory_mib=memory)
