"""Fuzzing the real `berth webhook` over TLS: 100,000 generated and mutated AdmissionReviews.

`berth certs` issues the serving pair, `berth webhook` serves the sample policy
(config/policy/sample-policy.yaml) as a subprocess, and this script sends it cases built from
the AdmissionReviews recorded from a real kube-apiserver (tests/admission/webhook/fixtures):
valid pods, pods mutated (types swapped, deep nesting, unicode digits, huge and negative
numbers, NaN/inf, long strings, Berth and ecosystem keys sprinkled in, fields removed),
non-Pod kinds, UPDATE/DELETE/CONNECT, truncated JSON, non-JSON bodies, wrong content types,
wrong methods and paths, oversize bodies. It counts answers per HTTP status, checks every
answer, and reports throughput and latency. A measurement, not a test: it exits non-zero only
when an invariant breaks (any 5xx, the server down or restarted, a refusal that names no field,
a patch that does not apply, an answer for another uid). Results: bench/webhook_fuzz.md.

    python3 bench/webhook_fuzz.py                  # 100,000 cases
    python3 bench/webhook_fuzz.py --quick          # 5,000 cases

Cases come from one mutation engine driven by two sources of choices, in a generator process
of its own: Hypothesis (``@given(st.data())`` run for --hypothesis-share of the cases, every
choice a ``data.draw`` of a strategy: unbounded integers, floats with NaN and infinities, any
unicode text, recursive JSON) and, for the rest, a seeded ``random.Random`` over curated pools of
hostile values (Hypothesis alone makes about 250 cases/s on a shared core).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import copy
import json
import multiprocessing as mp
import os
import random
import re
import resource
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from array import array
from collections import Counter
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from admission import constants as c  # noqa: E402
from admission.jsonpatch import PatchError  # noqa: E402
from admission.jsonpatch import apply as apply_patch  # noqa: E402

POLICY = REPO / "config" / "policy" / "sample-policy.yaml"
FIXTURES = REPO / "tests" / "admission" / "webhook" / "fixtures"
BERTH = (sys.executable, "-c", "from admission.cli import main; raise SystemExit(main())")
MAX_BODY = 4 * 1024 * 1024  # the server's limit (admission/webhook/server.py)
GEN_CAP = MAX_BODY + (2 << 20)  # no case is larger (memory of this machine)
SERVER_MEMORY = 4 << 30  # RLIMIT_AS of the server: a runaway allocation fails there, not here

# A refusal "names a field" when its message, after "Berth: ", starts with a field path of the
# pod and ": " - a root (metadata or spec) followed by any number of .name or [key] parts, as in
# metadata.annotations[berth.dev/gang-size] or spec.containers[0].resources.limits[nvidia.com/gpu]
# (the form PodProblem paths take). Only the first problem of a multi-problem message is read.
FIELD_PATH = r"(?:metadata|spec)(?:\.[A-Za-z][A-Za-z0-9]*|\[[^\]]*\])*"
NAMES_FIELD = re.compile(rf"^Berth: {FIELD_PATH}: ")

# ---------------------------------------------------------------------------- hostile values
UNICODE_DIGITS = ["²", "³", "¹", "٣", "१", "８", "𝟖", "⑧", "Ⅷ", "〇", "৪", "߁", "٨٫٥"]
NUMBER_STRINGS = ["NaN", "nan", "-NaN", "inf", "-inf", "Infinity", "-Infinity", "1e309", "-1e309",
                  "1e-400", "0", "-0", "-1", "-8", "0.0", "8.0", "8.5", "0.5", "1/2", "0x8", "0o10",
                  "0b1", "1_000", " 8 ", "\t8\n", "+8", "08", "8Gi", "8m", "500m", "1k", "1Ki",
                  "9" * 30, "-" + "9" * 30, str(2**63), str(-(2**63) - 1), str(2**64), "1e20",
                  "", " ", "null", "true", "[]", "{}", "0.25", "0.250000000001", "1.0000001",
                  "1e0", ".5", "5.", "½", "¼"]
WEIRD_STRINGS = ["\x00", "a\x00b", "\u202e" + "evil", "\ufeff", "é" * 3, "🚀" * 5, "\\", '"',
                 "'", "${HOME}", "$(id)", "../../etc/passwd", "%00", "<script>", "a" * 64,
                 "a" * 254, "A-b_c.D", "-leading", "trailing-", "team-b", "team-a", "default",
                 "kube-system", "required:rack", "preferred:node", "required:", ":rack",
                 "required:moon", "rack", "nvlink", "training", "inference", "notebook",
                 "NVIDIA-A100-SXM4-80GB", "NVIDIA-H100-80GB-HBM3", "NVIDIA-A100-SXM4-80GB,",
                 ",,,", "berth.dev/admission"]
NASTY_STRINGS = UNICODE_DIGITS + NUMBER_STRINGS + WEIRD_STRINGS
NASTY_SCALARS: list[Any] = [0, -1, 1, 8, -8, 2**31, 2**63 - 1, -(2**63), 2**64, 10**30, -(10**30),
                            0.5, -0.0, 1e308, -1e308, 5e-324, float("nan"), float("inf"),
                            float("-inf"), True, False, None, [], {}, [None], {"": None}]
# Keys a pod may carry that Berth reads or writes (its own and the ecosystem's it accepts).
BERTH_KEYS = [c.ANNOTATION_GANG, c.ANNOTATION_GANG_SIZE, c.ANNOTATION_FRACTION,
              c.ANNOTATION_GPU_MEMORY, c.ANNOTATION_GPU_MODELS, c.ANNOTATION_QOS_CLASS,
              c.ANNOTATION_TOPOLOGY, c.ANNOTATION_PRIORITY, c.ANNOTATION_TENANT,
              c.ANNOTATION_GANG_NAME, c.ANNOTATION_GANG_SOURCE, c.ANNOTATION_GPU_COUNT,
              c.ANNOTATION_GPU_MILLI, c.ANNOTATION_GPU_MEMORY_MIB, c.ANNOTATION_ALLOWED_MODELS,
              c.ANNOTATION_SHARING, c.ANNOTATION_QUEUE, c.ANNOTATION_POLICY_GENERATION,
              *c.ASSIGNMENT_ANNOTATIONS, c.LABEL_MANAGED, c.LABEL_TENANT, c.LABEL_GANG,
              c.LABEL_QOS_CLASS, c.KUEUE_QUEUE_LABEL, c.KUEUE_POD_GROUP_LABEL,
              c.KUEUE_POD_GROUP_COUNT, c.VOLCANO_GROUP_ANNOTATION, c.VOLCANO_QUEUE_ANNOTATION,
              c.KAI_QUEUE_LABEL, c.KAI_POD_GROUP, c.KAI_FRACTION, c.KAI_MEMORY,
              c.KAI_FRACTION_DEVICES, c.KAI_FRACTION_CONTAINER, c.HAMI_GPU_TYPE, c.HAMI_GPU_MEM,
              c.HAMI_GPU_MEM_PERCENT, c.HAMI_GPU_CORES, c.JOB_NAME_LABEL, c.JOBSET_NAME_LABEL,
              c.JOBSET_REPLICAS_ANNOTATION, c.PYTORCHJOB_NAME_LABEL, c.RAY_CLUSTER_LABEL,
              c.LABEL_GPU_PRODUCT]
RESOURCE_KEYS = [c.RESOURCE_GPU, "nvidia.com/gpu.shared", "cpu", "memory", "nvidia.com/mig-1g.10gb",
                 c.HAMI_GPU_MEM, c.HAMI_GPU_CORES]
KINDS = [{"group": "apps", "version": "v1", "kind": "Deployment"},
         {"group": "", "version": "v1", "kind": "Service"},
         {"group": "batch", "version": "v1", "kind": "Job"},
         {"group": "x.io", "version": "v1", "kind": "Pod"},
         {"group": "", "version": "v1", "kind": "pod"},
         {"group": "", "version": "v1", "kind": "Binding"},
         {"kind": "Pod"}, {}, None, "Pod", ["Pod"], {"group": None, "kind": "Pod"}]
OPERATIONS = ["UPDATE", "DELETE", "CONNECT", "create", "Create", "", None, 1, ["CREATE"],
              "CREATE "]
CONTENT_TYPES = ["application/yaml", "text/plain", "application/x-www-form-urlencoded",
                 "multipart/form-data; boundary=x", "application/json; charset=latin-1",
                 "application/vnd.kubernetes.protobuf", "", "application/json;;;"]
FAMILIES = (  # (family, weight): what each case is
    ("valid", 3), ("pod-mutated", 58), ("berth-keys", 12), ("envelope", 11),
    ("truncated", 5), ("not-json", 5), ("content-type", 3), ("method-path", 1.6),
    ("expect", 0.2), ("large-under-limit", 0.1), ("oversize", 0.1),
)


# ---------------------------------------------------------------------------- choice sources
class Chooser:
    """Where a case's choices come from: a seeded random.Random, or Hypothesis draws."""

    def integer(self, lo: int, hi: int) -> int:
        raise NotImplementedError

    def choice(self, seq: Sequence[Any]) -> Any:
        return seq[self.integer(0, len(seq) - 1)]

    def chance(self, p: float) -> bool:
        return self.integer(0, 9999) < p * 10000

    def weighted(self, pairs: Sequence[tuple[Any, float]]) -> Any:
        total = sum(w for _, w in pairs)
        x = self.integer(0, 10**6 - 1) / 10**6 * total
        for item, w in pairs:
            if x < w:
                return item
            x -= w
        return pairs[-1][0]

    def string(self) -> str:
        raise NotImplementedError

    def value(self) -> Any:
        raise NotImplementedError


class RandomChooser(Chooser):
    def __init__(self, rng: random.Random) -> None:
        self.rng = rng

    def integer(self, lo: int, hi: int) -> int:
        return self.rng.randint(lo, hi)

    def string(self) -> str:
        r = self.rng.random()
        if r < 0.7:
            return self.rng.choice(NASTY_STRINGS)
        if r < 0.85:  # random unicode, surrogates included
            return "".join(chr(self.rng.randint(0, 0x10FFFF)) for _ in range(self.rng.randint(
                1, 12)))
        if r < 0.95:
            return self.rng.choice(UNICODE_DIGITS) * self.rng.randint(1, 4)
        return self.rng.choice("ab9²") * self.rng.choice((300, 5000, 70000))

    def value(self) -> Any:
        r = self.rng.random()
        if r < 0.45:
            return self.string()
        if r < 0.8:
            return self.rng.choice(NASTY_SCALARS)
        if r < 0.9:
            return self.rng.randint(-(2**70), 2**70)
        return {self.string(): self.string()} if self.rng.random() < 0.5 else [self.string()]


class HypothesisChooser(Chooser):
    def __init__(self, data: Any) -> None:
        from hypothesis import strategies as st
        self.data, self.st = data, st

    def integer(self, lo: int, hi: int) -> int:
        return int(self.data.draw(self.st.integers(lo, hi)))

    def choice(self, seq: Sequence[Any]) -> Any:
        return self.data.draw(self.st.sampled_from(list(seq)))

    def string(self) -> str:
        return str(self.data.draw(_strategies()["string"]))

    def value(self) -> Any:
        return self.data.draw(_strategies()["value"])


_STRATEGIES: dict[str, Any] = {}


def _strategies() -> dict[str, Any]:
    if not _STRATEGIES:
        from hypothesis import strategies as st
        digits = st.text(st.characters(categories=["Nd", "No", "Nl"]), min_size=1, max_size=4)
        string = st.one_of(st.sampled_from(NASTY_STRINGS), st.text(max_size=30), digits,
                           st.from_regex(r"-?\d+(\.\d*)?([eE][-+]?\d+)?", fullmatch=True),
                           st.integers().map(str), st.floats().map(str))
        scalar = st.one_of(string, st.integers(), st.floats(), st.booleans(), st.none())
        value = st.one_of(scalar, st.recursive(
            scalar, lambda inner: st.lists(inner, max_size=3)
            | st.dictionaries(st.text(max_size=8), inner, max_size=3), max_leaves=6))
        _STRATEGIES.update(string=string, value=value)
    return _STRATEGIES


# ---------------------------------------------------------------------------- the cases
@dataclass
class Case:
    n: int
    source: str  # hypothesis | random
    family: str
    what: list[str]  # the mutations, for a reproducer
    method: str = "POST"
    path: str = "/mutate-pods"
    headers: dict[str, str] = field(default_factory=lambda: {"Content-Type": "application/json"})
    body: bytes = b""
    chunked: bool = False  # send the body without a Content-Length
    uid: str | None = None  # what the answer must carry, when the review is well formed
    obj: Any = None  # the pod the patch must apply to (None: not checked)
    nests: list[tuple[str, int]] = field(default_factory=list)  # (opener, depth) spliced in


def _short(v: Any) -> str:
    text = repr(v)
    return text if len(text) <= 60 else f"{text[:40]}...({len(text)} chars)"


def _paths(node: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix] if prefix else []
    if isinstance(node, dict):
        for k, v in node.items():
            if k == "managedFields":
                out.append((*prefix, k))
                continue
            out += _paths(v, (*prefix, k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            out += _paths(v, (*prefix, i))
    return out


def _dotted(path: Sequence[Any]) -> str:
    return "".join(f"[{p}]" if isinstance(p, int) or "/" in str(p) or "." in str(p)
                   else f".{p}" for p in path).lstrip(".")


def _get(doc: Any, path: Sequence[Any]) -> Any:
    for p in path:
        doc = doc[p]
    return doc


NEST = "\x01nest{}\x01"  # a placeholder string, replaced by raw deeply nested JSON text


def _mutate_pod(ch: Chooser, pod: dict[str, Any], what: list[str],
                nests: list[tuple[str, int]]) -> None:
    """One mutation; one that does not apply to what earlier ones left is dropped."""
    try:
        _mutate_pod_once(ch, pod, what, nests)
    except (TypeError, ValueError, KeyError, IndexError, AttributeError):
        what.append("(a mutation that did not apply)")


def _mutate_pod_once(ch: Chooser, pod: dict[str, Any], what: list[str],
                     nests: list[tuple[str, int]]) -> None:
    paths = [p for p in _paths(pod) if p[0] in ("metadata", "spec")]
    if not paths:
        return
    path = ch.choice(paths)
    kind = ch.weighted((("set", 30), ("delete", 15), ("swap-type", 20), ("nest", 5),
                        ("long", 5), ("quantity", 15), ("containers", 5), ("null-map", 5)))
    parent = _get(pod, path[:-1])
    key = path[-1]
    if kind == "set":
        parent[key] = v = ch.value()
        what.append(f"set {_dotted(path)} = {_short(v)}")
    elif kind == "delete":
        del parent[key]
        what.append(f"delete {_dotted(path)}")
    elif kind == "swap-type":
        old = parent[key]
        options: list[Any] = [str(old), 8, -1, 0.5, True, None, [old], {"x": old}, [], {}]
        parent[key] = v = ch.choice(options)
        what.append(f"swap type of {_dotted(path)} to {type(v).__name__}: {_short(v)}")
    elif kind == "nest":
        depth = ch.choice((10, 100, 1000, 1100, 5000, 100_000))
        opener = ch.choice(("[", '{"a":'))
        nests.append((opener, depth))
        parent[key] = NEST.format(len(nests) - 1)
        kind_of = "lists" if opener == "[" else "objects"
        what.append(f"nest {_dotted(path)} {depth} deep in {kind_of} ({opener * 2}...)")
    elif kind == "long":
        n = ch.weighted(((1000, 6), (64_000, 3), (1_000_000, 1)))
        parent[key] = ch.choice(("a", "²", "🚀", "9")) * n
        what.append(f"set {_dotted(path)} to a string of {n} chars")
    elif kind == "quantity":
        conts = pod.get("spec", {}).get("containers") if isinstance(pod.get("spec"), dict) else None
        if isinstance(conts, list) and conts and isinstance(conts[0], dict):
            i = ch.integer(0, len(conts) - 1)
            res = conts[i].setdefault("resources", {})
            if isinstance(res, dict):
                where = ch.choice(("limits", "requests"))
                m = res.setdefault(where, {})
                if isinstance(m, dict):
                    k = ch.choice(RESOURCE_KEYS)
                    m[k] = v = ch.string() if ch.chance(0.7) else ch.value()
                    what.append(f"set spec.containers[{i}].resources.{where}[{k}] = {_short(v)}")
    elif kind == "containers":
        spec = pod.get("spec")
        if isinstance(spec, dict) and isinstance(spec.get("containers"), list) \
                and spec["containers"] and isinstance(spec["containers"][0], dict):
            n = ch.choice((0, 2, 50, 400))
            one = len(json.dumps(spec["containers"][0], allow_nan=True))
            n = min(n, GEN_CAP // max(1, one))  # no copying past the cap
            which = ch.choice(("containers", "initContainers", "ephemeralContainers"))
            # deep copies: shared nested maps would make the bench's own patch check (it applies
            # each answer to its copy of the pod) remove a key once for all copies
            spec[which] = [dict(copy.deepcopy(spec["containers"][0]), name=f"c{j}")
                           for j in range(n)]
            what.append(f"spec.{which} = {n} copies of container 0")
    elif kind == "null-map":
        meta = pod.get("metadata")
        if isinstance(meta, dict):
            k = ch.choice(("labels", "annotations", "ownerReferences", "name", "namespace"))
            meta[k] = v = ch.choice((None, [], "x", 0, {"": ""}))
            what.append(f"set metadata.{k} = {_short(v)}")


def _berth_keys(ch: Chooser, pod: dict[str, Any], what: list[str]) -> None:
    meta = pod.setdefault("metadata", {})
    for _ in range(ch.integer(1, 4)):
        where = ch.choice(("annotations", "labels"))
        m = meta.setdefault(where, {})
        if not isinstance(m, dict):
            m = meta[where] = {}
        key = ch.choice(BERTH_KEYS)
        m[key] = v = ch.string() if ch.chance(0.85) else ch.value()
        what.append(f"set metadata.{where}[{key}] = {_short(v)}")


def _envelope(ch: Chooser, review: dict[str, Any], what: list[str]) -> None:
    req = review["request"]
    for _ in range(ch.integer(1, 3)):
        kind = ch.choice(("kind", "operation", "namespace", "uid", "apiVersion", "review-kind",
                          "request", "object", "subResource", "dryRun", "oldObject"))
        if kind == "kind":
            req["kind"] = v = ch.choice(KINDS)
        elif kind == "operation":
            req["operation"] = v = ch.choice(OPERATIONS)
            if v == "DELETE" and ch.chance(0.5):
                req["oldObject"], req["object"] = req.get("object"), None
        elif kind == "namespace":
            v = ch.choice(("unmanaged", "", None, 7, "team-a", "team-b", "kube-system",
                           ch.string()))
            req["namespace"] = v
        elif kind == "uid":
            req["uid"] = v = ch.choice((None, 12, "", "x" * 100_000, ch.string(), ["u"]))
        elif kind == "apiVersion":
            review["apiVersion"] = v = ch.choice(("admission.k8s.io/v1beta1",
                                                  "admission.k8s.io/v2", "v1", "", None, 1))
        elif kind == "review-kind":
            review["kind"] = v = ch.choice(("AdmissionResponse", "", None, "Pod"))
        elif kind == "request":
            v = ch.choice((None, [], "x", {}, 0))
            review["request"] = v
            what.append(f"set request = {_short(v)}")
            return
        elif kind == "object":
            req["object"] = v = ch.choice((None, [], "pod", 0, {}, {"metadata": None}))
        elif kind == "subResource":
            req["subResource"] = v = ch.choice(("status", "binding", "ephemeralcontainers", ""))
        elif kind == "dryRun":
            req["dryRun"] = v = ch.choice((True, "yes", None))
        else:
            req["oldObject"] = v = req.get("object")
        what.append(f"set {kind} = {_short(v)}")


def _encode(ch: Chooser, doc: Any, nests: list[tuple[str, int]]) -> bytes:
    ascii_ = ch.chance(0.5)
    text = json.dumps(doc, ensure_ascii=ascii_, allow_nan=True)
    for i, (opener, depth) in enumerate(nests):
        placeholder = json.dumps(NEST.format(i), ensure_ascii=ascii_)
        closer = "]" if opener == "[" else "}"
        text = text.replace(placeholder, opener * depth + "1" + closer * depth, 1)
    return text.encode("utf-8", errors="surrogatepass")


def make_case(ch: Chooser, fixtures: list[tuple[str, bytes]], n: int, source: str) -> Case:
    """One case; mutations that compound past GEN_CAP bytes are drawn again (the oversize
    family alone tests the server's limit)."""
    for _ in range(20):
        try:
            case = _make_case(ch, fixtures, n, source)
        except (MemoryError, RecursionError):  # mutations that compound: draw again
            continue
        if len(case.body) <= GEN_CAP:
            return case
    name, raw = fixtures[0]
    return Case(n, source, "valid", [f"fixture {name} as recorded (fallback)"], body=raw)


def _make_case(ch: Chooser, fixtures: list[tuple[str, bytes]], n: int, source: str) -> Case:
    family = ch.weighted(FAMILIES)
    name, raw = ch.choice(fixtures)
    review = json.loads(raw)
    review["request"]["uid"] = f"fuzz-{n}"
    case = Case(n, source, family, [f"fixture {name}"])
    nests: list[tuple[str, int]] = []
    if family == "valid":
        pass
    elif family == "pod-mutated":
        for _ in range(ch.integer(1, 4)):
            _mutate_pod(ch, review["request"]["object"], case.what, nests)
    elif family == "berth-keys":
        _berth_keys(ch, review["request"]["object"], case.what)
        if ch.chance(0.3):
            _mutate_pod(ch, review["request"]["object"], case.what, nests)
    elif family == "envelope":
        _envelope(ch, review, case.what)
    body = _encode(ch, review, nests)
    case.nests = nests
    req = review.get("request")
    well_formed = isinstance(req, dict) and b"NaN" not in body \
        and b"Infinity" not in body and review.get("apiVersion") in (
            "admission.k8s.io/v1", "admission.k8s.io/v1beta1")
    if well_formed and isinstance(req, dict) and isinstance(req.get("uid"), str):
        case.uid = req["uid"]
        # The patch is checked against the pod as sent; a nested value is spliced in as text,
        # so such a pod is not checked.
        case.obj = None if nests else req.get("object")
    if family == "truncated":
        cut = ch.integer(0, len(body) - 1)
        body, case.uid, case.obj = body[:cut], None, None
        case.what.append(f"truncated to {cut} of its bytes")
    elif family == "not-json":
        kind = ch.choice(("random-bytes", "invalid-utf8", "yaml", "xml", "empty", "scalar",
                          "bom", "nan-literal", "trailing-garbage", "duplicate-keys",
                          "lone-surrogate", "utf16"))
        make: dict[str, Callable[[], bytes]] = {  # built lazily: only the one drawn
            "random-bytes": lambda: bytes(ch.integer(0, 255) for _ in range(ch.integer(1, 64))),
            "invalid-utf8": lambda: body[:200] + b"\xff\xfe\xc3\x28" + body[200:],
            "yaml": lambda: b"apiVersion: admission.k8s.io/v1\nkind: AdmissionReview\n",
            "xml": lambda: b"<?xml version='1.0'?><AdmissionReview/>",
            "empty": lambda: b"",
            "scalar": lambda: ch.choice((b"null", b"[]", b"1", b'"review"', b"true", b"{}")),
            "bom": lambda: b"\xef\xbb\xbf" + body,
            "nan-literal": lambda: body.replace(b'"uid"', b'"nan": NaN, "uid"', 1),
            "trailing-garbage": lambda: body + b"}{",
            "duplicate-keys": lambda: body.replace(b'{"kind"', b'{"request": 1, "kind"', 1),
            "lone-surrogate": lambda: body.replace(b'"uid"', b'"\\udc00": 1, "uid"', 1),
            "utf16": lambda: body.decode("utf-8", "surrogatepass").encode("utf-16",
                                                                            "surrogatepass"),
        }
        body = make[kind]()
        case.uid = case.obj = None
        case.what.append(f"body: {kind}")
    elif family == "content-type":
        case.headers = {"Content-Type": v} if (v := ch.choice(CONTENT_TYPES)) else {}
        case.what.append(f"Content-Type {v!r}")
    elif family == "method-path":
        case.method, case.path = ch.choice((
            ("GET", "/mutate-pods"), ("PUT", "/mutate-pods"), ("DELETE", "/mutate-pods"),
            ("PATCH", "/mutate-pods"), ("POST", "/mutate-pod"), ("POST", "/"),
            ("POST", "/healthz"), ("POST", "/metrics"), ("POST", "/mutate-pods/x"),
            ("POST", "/mutate-pods?timeout=10s"), ("POST", "//mutate-pods"),
            ("POST", "/MUTATE-PODS"), ("OPTIONS", "/mutate-pods")))
        if "?" not in case.path:
            case.uid = case.obj = None
        case.what.append(f"{case.method} {case.path}")
    elif family == "expect":
        case.headers["Expect"] = v = ch.choice(("100-continue", "200-ok", ""))
        if v != "100-continue":
            case.uid = case.obj = None
        case.what.append(f"Expect: {v!r}")
    elif family == "large-under-limit":
        pad = MAX_BODY - len(body) - 200
        review["request"]["object"]["metadata"].setdefault("annotations", {})["pad"] = "p" * pad
        body = _encode(ch, review, [])
        case.what.append(f"a {len(body)}-byte review (limit {MAX_BODY})")
        case.obj = review["request"]["object"]
    elif family == "oversize":
        case.chunked = ch.chance(0.5)
        body = body + b" " * max(0, MAX_BODY + 1 - len(body) + ch.integer(0, 1 << 20))
        case.uid = case.obj = None
        case.what.append(f"{len(body)} bytes{' chunked' if case.chunked else ''}")
    case.body = body
    return case


def generate(out: Any, cases: int, seed: int, share: float) -> None:
    """Produce every case, in batches, into ``out`` (runs in a process of its own); a failure
    is sent as its traceback, so the sender stops at once."""
    resource.setrlimit(resource.RLIMIT_AS, (SERVER_MEMORY,) * 2)
    try:
        _generate(out, cases, seed, share)
    except BaseException:
        import traceback
        out.put(traceback.format_exc()[-3000:])
        raise


def _generate(out: Any, cases: int, seed: int, share: float) -> None:
    from hypothesis import HealthCheck, Phase, given, settings
    from hypothesis import seed as hseed
    from hypothesis import strategies as st

    fixtures = [(p.name, p.read_bytes()) for p in sorted(FIXTURES.glob("*.json"))]
    rnd = RandomChooser(random.Random(seed))
    batch: list[Case] = []
    made = Counter[str]()
    n_hyp = round(cases * share)
    per_hyp = (cases - n_hyp) / n_hyp if n_hyp else 0.0
    debt = 0.0

    def emit(case: Case) -> None:
        nonlocal batch
        batch.append(case)
        made[case.source] += 1
        if len(batch) >= 100:
            out.put(batch)
            batch = []

    def total() -> int:
        return sum(made.values())

    @hseed(seed)
    @settings(max_examples=max(1, n_hyp), phases=[Phase.generate], database=None,
              deadline=None, suppress_health_check=list(HealthCheck))
    @given(st.data())
    def from_hypothesis(data: Any) -> None:
        nonlocal debt
        if total() >= cases:
            return
        emit(make_case(HypothesisChooser(data), fixtures, total(), "hypothesis"))
        debt += per_hyp
        while debt >= 1 and total() < cases:
            emit(make_case(rnd, fixtures, total(), "random"))
            debt -= 1

    if n_hyp:
        from_hypothesis()
    while total() < cases:  # Hypothesis may stop short of max_examples
        emit(make_case(rnd, fixtures, total(), "random"))
    if batch:
        out.put(batch)
    out.put(dict(made))


# ---------------------------------------------------------------------------- sending, judging
@dataclass
class Tally:
    statuses: Counter[tuple[str, int]] = field(default_factory=Counter)  # (family, status)
    transport: Counter[str] = field(default_factory=Counter)  # family: error
    transport_samples: list[str] = field(default_factory=list)
    five_xx: list[str] = field(default_factory=list)
    outcomes: Counter[str] = field(default_factory=Counter)
    refusals: int = 0
    no_field: dict[str, list[Any]] = field(default_factory=dict)  # pattern -> [n, msg, what]
    bad_patch: list[str] = field(default_factory=list)
    bad_answer: list[str] = field(default_factory=list)
    latencies: array = field(default_factory=lambda: array("d"))  # type: ignore[type-arg]
    sources: dict[str, int] = field(default_factory=dict)
    crashes: list[Any] = field(default_factory=list)  # Crash
    skipped: int = 0  # cases like a known crasher, not sent
    no_field_cases: dict[str, str] = field(default_factory=dict)  # uid -> case, for the log
    exceptions: dict[str, list[Any]] = field(default_factory=dict)  # from the server's log


def _pattern(message: str) -> str:
    text = re.sub(r"'[^']*'|\"[^\"]*\"", "'…'", message)
    text = re.sub(r"\d+", "N", text)
    return text[:200]


def judge(case: Case, status: int, body: bytes, tally: Tally) -> None:
    tally.statuses[(case.family, status)] += 1
    desc = f"case {case.n} ({case.source}, {case.family}): {'; '.join(case.what)}"
    if status >= 500:
        tally.five_xx.append(f"{status}: {desc}: {body[:300]!r}")
        return
    if status != 200:
        return
    try:
        answer = json.loads(body)
        resp = answer["response"]
        allowed = resp["allowed"]
    except (ValueError, KeyError, TypeError):
        tally.bad_answer.append(f"200 that is no AdmissionReview answer: {desc}: {body[:200]!r}")
        return
    if case.uid is not None and resp.get("uid") != case.uid:
        tally.bad_answer.append(f"uid {resp.get('uid')!r} for {case.uid!r}: {desc}")
    if allowed is False:
        tally.refusals += 1
        tally.outcomes["refused"] += 1
        message = str((resp.get("status") or {}).get("message", ""))
        if not NAMES_FIELD.match(message):
            entry = tally.no_field.setdefault(_pattern(message), [0, message, desc])
            entry[0] += 1
            if len(tally.no_field_cases) < 5000:
                tally.no_field_cases[case.uid or f"fuzz-{case.n}"] = desc
        return
    if "patch" not in resp:
        tally.outcomes["allowed untouched"] += 1
        return
    tally.outcomes["allowed with a patch"] += 1
    if case.obj is None:
        return
    try:
        ops = json.loads(base64.b64decode(resp["patch"]))
        apply_patch(case.obj, ops)
    except (PatchError, ValueError, TypeError, KeyError, IndexError) as exc:
        tally.bad_patch.append(f"{type(exc).__name__}: {str(exc)[:200]}: {desc}")


async def _chunks(body: bytes) -> AsyncIterator[bytes]:
    for i in range(0, len(body), 1 << 16):
        yield body[i:i + (1 << 16)]


class Server:
    """The `berth webhook` subprocess; started again after a crash (the crash is counted)."""

    def __init__(self, work: Path) -> None:
        self.certs = work / "certs"
        subprocess.run([*BERTH, "certs", "--out", str(self.certs), "--host", "127.0.0.1"],
                       check=True, capture_output=True, cwd=REPO)
        self.ca = self.certs / "ca.crt"
        self.port = _free_port()
        self.log = work / "webhook.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.cpu_s = 0.0  # CPU of every incarnation
        self.incarnation = 0

    def start(self) -> None:
        self.incarnation += 1
        with self.log.open("ab") as log:
            self.proc = subprocess.Popen(
                [*BERTH, "webhook", "--policy", str(POLICY), "--cert-dir", str(self.certs),
                 "--port", str(self.port), "--log-level", "WARNING"],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=REPO,
                preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_AS, (SERVER_MEMORY,) * 2))
        deadline = time.monotonic() + 60
        while not _healthy(self.port, self.ca):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"berth webhook did not start:\n{self.log.read_text()}")
            time.sleep(0.2)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def cpu(self) -> float:
        if self.proc is None:
            return self.cpu_s
        try:
            fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
            return self.cpu_s + sum(int(x) for x in fields[11:13]) / os.sysconf("SC_CLK_TCK")
        except OSError:
            return self.cpu_s

    def stop(self) -> None:
        if self.proc is None:
            return
        self.cpu_s = self.cpu()
        self.proc.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=30)
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


@dataclass
class Crash:
    returncode: int | None
    suspects: list[Case]
    culprits: list[str] = field(default_factory=list)


async def send_all(server: Server, queue: Any, concurrency: int, tally: Tally) -> float:
    """Send every case; judge every answer. When the server dies, the cases then in flight
    are replayed one at a time against a fresh server to find the one that kills it; cases of
    the same deep nesting (same opener, at least as deep) are then skipped, so that one known
    crash does not turn the rest of the run into restarts."""
    import aiohttp

    ctx = ssl.create_default_context(cafile=str(server.ca))
    base = f"https://127.0.0.1:{server.port}"
    cases: asyncio.Queue[Case | None] = asyncio.Queue(maxsize=4 * concurrency)
    in_flight: dict[int, Case] = {}
    lock = asyncio.Lock()
    quarantine: list[tuple[str, int]] = []  # (opener, depth) known to crash the server

    def new_session() -> aiohttp.ClientSession:
        return aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(ssl=ctx, limit=concurrency),
            timeout=aiohttp.ClientTimeout(total=60), skip_auto_headers=("Content-Type",))

    session = [new_session()]  # one per server incarnation: no connection outlives its server

    async def feed() -> None:
        while True:
            item = await asyncio.to_thread(queue.get, True, 600)  # raises if the generator dies
            if isinstance(item, str):
                raise RuntimeError(f"the case generator failed:\n{item}")
            if isinstance(item, dict):
                tally.sources = item
                break
            for case in item:
                await cases.put(case)
        for _ in range(concurrency):
            await cases.put(None)

    async def send(s: aiohttp.ClientSession, case: Case) -> tuple[int, bytes]:
        data: Any = _chunks(case.body) if case.chunked else case.body
        async with s.request(case.method, base + case.path, data=data,
                             headers=case.headers) as r:
            return r.status, await r.read()

    def restart() -> None:
        server.stop()
        server.start()

    async def after_crash(incarnation: int) -> None:
        async with lock:
            if server.incarnation != incarnation:
                return  # another worker handled this crash
            assert server.proc is not None
            crash = Crash(server.proc.returncode, sorted(in_flight.values(), key=lambda c: c.n))
            tally.crashes.append(crash)
            old = session[0]
            restart()
            session[0] = new_session()
            await old.close()
            async with new_session() as one:
                for suspect in crash.suspects:
                    with contextlib.suppress(aiohttp.ClientError, OSError, TimeoutError):
                        await send(one, suspect)
                    await asyncio.sleep(0.3)
                    if not server.alive():
                        assert server.proc is not None
                        crash.culprits.append(
                            f"case {suspect.n} ({suspect.source}, {suspect.family}), exit "
                            f"{server.proc.returncode}: {'; '.join(suspect.what)}")
                        quarantine.extend(suspect.nests)
                        restart()
                        break

    async def worker(wid: int) -> None:
        while (case := await cases.get()) is not None:
            if any(o == qo and d >= qd for o, d in case.nests for qo, qd in quarantine):
                tally.skipped += 1
                continue
            incarnation = server.incarnation
            in_flight[wid] = case
            t = time.perf_counter()
            try:
                status, body = await send(session[0], case)
            except (TimeoutError, aiohttp.ClientError, OSError) as exc:
                await asyncio.sleep(0.2)
                if not server.alive() or server.incarnation != incarnation:
                    tally.transport["(a server crash)"] += 1
                    await after_crash(incarnation)
                    in_flight.pop(wid, None)
                    continue
                in_flight.pop(wid, None)
                tally.transport[case.family] += 1
                if len(tally.transport_samples) < 20:
                    tally.transport_samples.append(
                        f"{type(exc).__name__}: {exc}: case {case.n} {case.family}: "
                        f"{'; '.join(case.what)}")
                continue
            in_flight.pop(wid, None)
            tally.latencies.append(time.perf_counter() - t)
            judge(case, status, body, tally)

    t0 = time.perf_counter()
    try:
        await asyncio.gather(feed(), *(worker(i) for i in range(concurrency)))
    finally:
        await session[0].close()
    return time.perf_counter() - t0


def _healthy(port: int, ca: Path) -> bool:
    ctx = ssl.create_default_context(cafile=str(ca))
    try:
        with urllib.request.urlopen(f"https://127.0.0.1:{port}/healthz", context=ctx,
                                    timeout=5) as r:
            return bool(r.status == 200)
    except OSError:
        return False


def _free_port() -> int:
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _pct(values: Sequence[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))] if s else float("nan")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", type=int, default=100_000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--concurrency", type=int, default=8, help="connections in flight")
    ap.add_argument("--hypothesis-share", type=float, default=0.1,
                    help="share of the cases whose every choice Hypothesis draws (default 0.1)")
    ap.add_argument("--quick", action="store_true", help="5,000 cases")
    ap.add_argument("--server-log", type=Path, default=None,
                    help="copy the server's log (every incarnation) here")
    ap.add_argument("--out", type=Path, default=Path(__file__).with_name("webhook_fuzz.md"),
                    help="append the figures here (default bench/webhook_fuzz.md; '-': none)")
    args = ap.parse_args()
    if args.quick:
        args.cases = 5000
    argv = " ".join(sys.argv[1:])
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="berth-fuzz-") as tmp:
        server = Server(Path(tmp))
        server.start()
        try:
            queue = mp.get_context("fork").Queue(maxsize=16)
            gen = mp.get_context("fork").Process(
                target=generate, args=(queue, args.cases, args.seed, args.hypothesis_share),
                daemon=True)
            gen.start()
            tally = Tally()
            send_s = asyncio.run(send_all(server, queue, args.concurrency, tally))
            gen.join(timeout=30)
            alive = server.alive()
            healthy = _healthy(server.port, server.ca)
            cpu = server.cpu()
        finally:
            server.stop()
        log_text = server.log.read_text(errors="replace")
        if args.server_log:
            args.server_log.write_text(log_text)
    fig = figures(tally, args, send_s, alive, healthy, log_text, cpu, time.monotonic() - started)
    return report(fig, tally, args, argv)


def _exceptions(log_text: str, cases: dict[str, str]) -> dict[str, list[Any]]:
    """The last line of every traceback in the server's log (the exception raised), with the
    number of times and the case of the first one (the server logs the review's uid)."""
    found: dict[str, list[Any]] = {}
    lines = log_text.splitlines()
    for i, line in enumerate(lines):
        if not line.startswith("Traceback (most recent call last)"):
            continue
        j = i + 1
        while j < len(lines) and (lines[j].startswith(" ") or not lines[j].strip()):
            j += 1
        last = lines[j] if j < len(lines) else "?"
        uid = re.search(r"review failed for request (\S+)", lines[i - 1]) if i else None
        entry = found.setdefault(_pattern(last), [0, last[:200], None])
        entry[0] += 1
        if entry[2] is None and uid:
            entry[2] = cases.get(uid.group(1))
    return found


def figures(tally: Tally, args: argparse.Namespace, send_s: float, alive: bool, healthy: bool,
            log_text: str, cpu: float | None, wall: float) -> dict[str, Any]:
    answered = sum(tally.statuses.values())
    by_status = Counter[int]()
    for (_, status), n in tally.statuses.items():
        by_status[status] += n
    lat = tally.latencies
    exceptions = _exceptions(log_text, tally.no_field_cases)
    tally.exceptions = exceptions
    fig: dict[str, Any] = {
        "cases": args.cases, "seed": args.seed, "concurrency": args.concurrency,
        "cases_by_source": tally.sources,
        "answered": answered,
        "by_status": dict(sorted(by_status.items())),
        "transport_errors": sum(tally.transport.values()),
        "transport_errors_by_family": dict(tally.transport),
        "5xx": len(tally.five_xx),
        "server_crashes": len(tally.crashes),
        "crash_exit_codes": [cr.returncode for cr in tally.crashes],
        "crashing_cases_found_by_replay": sum(len(cr.culprits) for cr in tally.crashes),
        "cases_skipped_as_known_crashers": tally.skipped,
        "server_alive_after": alive, "healthz_after": healthy,
        "review_outcomes_of_200s": dict(tally.outcomes),
        "refusals": tally.refusals,
        "refusals_naming_no_field": sum(v[0] for v in tally.no_field.values()),
        "patches_that_do_not_apply": len(tally.bad_patch),
        "bad_200_answers": len(tally.bad_answer),
        "server_tracebacks": sum(v[0] for v in exceptions.values()),
        "throughput_per_s": round(answered / send_s, 1) if send_s else "-",
        "latency_ms_p50_p99_max": (round(_pct(lat, 0.5) * 1000, 2),
                                   round(_pct(lat, 0.99) * 1000, 2),
                                   round(max(lat, default=float("nan")) * 1000, 1)),
        "latency_ms_mean": round(statistics.fmean(lat) * 1000, 2) if lat else "-",
        "server_cpu_s": round(cpu, 1) if cpu is not None else "-",
        "send_s": round(send_s, 1), "wall_s": round(wall, 1),
        "load_1m": round(os.getloadavg()[0], 1),
    }
    fig["invariants_held"] = bool(alive and healthy and not tally.crashes and not tally.five_xx
                                  and not tally.no_field
                                  and not tally.bad_patch and not tally.bad_answer)
    return fig


def report(fig: dict[str, Any], tally: Tally, args: argparse.Namespace, argv: str) -> int:
    for k, v in fig.items():
        print(f"{k:>28}: {v}")
    families = sorted({f for f, _ in tally.statuses} | set(tally.transport))
    statuses = sorted({s for _, s in tally.statuses})
    table = ["| family | " + " | ".join(str(s) for s in statuses) + " | transport error |",
             "|---|" + "---|" * (len(statuses) + 1)]
    for fam in families:
        table.append(f"| {fam} | " + " | ".join(str(tally.statuses.get((fam, s), 0))
                                                for s in statuses)
                     + f" | {tally.transport.get(fam, 0)} |")
    print("\n".join(table))
    groups = sorted(tally.no_field.items(), key=lambda kv: -kv[1][0])
    for _, (n, message, desc) in groups[:15]:
        print(f"  refusal naming no field x{n}: {message[:200]!r}\n      e.g. {desc[:300]}")
    crashes = [f"exit {cr.returncode}; culprit(s): {' | '.join(cr.culprits) or 'none found'}; "
               f"in flight: {', '.join(str(x.n) for x in cr.suspects)}" for cr in tally.crashes]
    excs = sorted(tally.exceptions.values(), key=lambda v: -v[0])
    for n, last, desc in excs:
        print(f"  server exception x{n}: {last}\n      e.g. {(desc or '?')[:300]}")
    for what, items in (("crash", crashes), ("5xx", tally.five_xx), ("patch", tally.bad_patch),
                        ("answer", tally.bad_answer), ("transport", tally.transport_samples)):
        for line in items[:5]:
            print(f"  {what}: {line[:400]}")
    if args.out and str(args.out) != "-":
        when = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
        lines = [f"\n### Run of {when}: `python3 bench/webhook_fuzz.py {argv}`\n",
                 "| figure | value |", "|---|---|"]
        lines += [f"| {k} | {str(v).replace('|', '/')} |" for k, v in fig.items()]
        lines += ["", "Answers per family and HTTP status:", "", *table]
        if groups:
            lines += ["", "Refusals whose message names no field, grouped (digits as N, quoted "
                      "values as '…'):", "", "| count | message | example case |", "|---|---|---|"]
            lines += [f"| {n} | `{m[:160]}` | {d[:240].replace('|', '/')} |"
                      for _, (n, m, d) in groups]
        if excs:
            lines += ["", "Exceptions in the server's log (each answered as an internal-error "
                      "refusal), with the first case that raised it:", "",
                      "| count | exception | example case |", "|---|---|---|"]
            lines += [f"| {n} | `{last[:160]}` | {(d or '?')[:300].replace('|', '/')} |"
                      for n, last, d in excs]
        for title, items in (("Server crashes", crashes), ("5xx answers", tally.five_xx),
                             ("Patches that do not apply", tally.bad_patch),
                             ("Bad 200 answers", tally.bad_answer),
                             ("Transport errors (samples)", tally.transport_samples)):
            if items:
                lines += ["", f"<details><summary>{title} ({len(items)})</summary>", ""]
                lines += [f"- {x[:400]}" for x in items[:50]]
                lines += ["", "</details>"]
        with args.out.open("a") as f:
            f.write("\n".join(lines) + "\n")
    return 0 if fig["invariants_held"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
