"""How long pods run: the *bounds* someone enforces and the *estimates* a tenant declares.

Two meanings, kept apart because a tenant writes both and trust follows the API server, not
the pod (DESIGN contract 7):

- A **bound** is enforced by someone other than the tenant: the kubelet ends a pod at its
  ``spec.activeDeadlineSeconds`` (counted from the pod's start; the API server lets it only be
  set or lowered afterwards); the Job controller ends a Job's pods at the Job's
  ``spec.activeDeadlineSeconds`` counted from the Job's ``status.startTime``; Kueue (release
  backend ``kueue`` only) deactivates a Workload past its ``kueue.x-k8s.io/max-exec-time-seconds``
  counted from its admission, and its plain-pod integration then deletes the pods.
- An **estimate** is what the pod declares in ``berth.dev/expected-runtime`` (bounded at CREATE
  by ``admission.maxExpectedRuntimeSeconds``); nothing ends the pod there. Where it declares
  none and the policy turns ``solver.learnedRuntimes`` on, the median run time of the last
  finished pods of its kind (its tenant, its owner's kind, its GPU count; :class:`Learner`,
  solver/history.py) is an estimate too.

What each may decide:

- Backfill eligibility (:attr:`solver.types.Gang.runtime_s`): only a bound the tenant cannot
  stretch once Berth has read it: the pod's own deadline, and Kueue's label (Kueue refuses to
  change it once the Workload is admitted, and Berth sees a gang only after that). Not a Job's
  deadline: the API server lets a Job's ``activeDeadlineSeconds`` be raised or removed at any
  time (k8s.io/kubernetes v1.34.4, pkg/apis/batch/validation ``ValidateJobSpecUpdate`` does not
  hold it immutable), so a Job that backfilled on a short deadline could stretch it afterwards
  and keep capacity held for another gang. Never an estimate.
- A running pod's expected end (:attr:`solver.types.Running.remaining_s`, which plans when a
  reservation's capacity frees): the earliest bound, the Job's included (a raised Job deadline
  only makes a plan late; it takes no capacity), else the estimate.

Past its end, a bound reads as it did before this module (a pod's own deadline past: 0, the
kubelet is ending it), but a Job or Kueue bound past and an estimate overrun read as unknown
(None), never 0: ``remaining_s <= 0`` tells reclaim that the pod is being deleted
(solver/reclaim.py), which an overrunning pod is not.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

from admission import constants as c
from admission.controller import translate as tr
from admission.controller.translate import Obj
from admission.durations import parse_duration
from solver.history import Kind, RunHistory
from solver.types import MAX_WAIT_SECONDS, LearnedRuntimes


class Source(StrEnum):
    """Where a run time comes from (the value of ``berth.dev/runtime-source``)."""

    POD_DEADLINE = "pod-deadline"  # the pod's activeDeadlineSeconds (kubelet)
    KUEUE = "kueue-max-exec-time"  # kueue.x-k8s.io/max-exec-time-seconds (Kueue backend)
    JOB_DEADLINE = "job-deadline"  # the owner Job's activeDeadlineSeconds (Job controller)
    DECLARED = "expected-runtime"  # berth.dev/expected-runtime: an estimate
    LEARNED = "learned"  # the median run time of finished pods of its kind: an estimate
    UNKNOWN = "unknown"

    @property
    def enforced(self) -> bool:
        return self not in (Source.DECLARED, Source.LEARNED, Source.UNKNOWN)


#: The longest run time read (ten years); a larger one is as good as none.
MAX_RUNTIME_S = tr.MAX_DEADLINE_S


@dataclass(frozen=True, slots=True)
class Expected:
    """Seconds from now until a pod ends (at the latest, for a bound), and where that comes
    from; ``remaining_s`` None: unknown."""

    remaining_s: float | None
    source: Source


UNKNOWN = Expected(None, Source.UNKNOWN)
_INT32_MAX = 2**31 - 1


def _whole_seconds(raw: object) -> int | None:
    if isinstance(raw, int) and not isinstance(raw, bool) and 0 < raw <= MAX_RUNTIME_S:
        return raw
    return None


def kueue_limit_s(pod: Obj, backend: str) -> float | None:
    """Kueue's maximum execution time of the pod (the label as Kueue's own parser reads it:
    a positive whole number), only when Kueue is the release backend; else None."""
    if backend != "kueue":
        return None
    raw = tr.labels(pod).get(c.KUEUE_MAX_EXEC_LABEL)
    if not raw or len(raw) > 10 or not raw.isascii() or not raw.isdigit():
        return None
    value = int(raw)
    if value > _INT32_MAX:  # Kueue parses it as an int32 and ignores what does not fit
        return None
    seconds = _whole_seconds(value)
    return None if seconds is None else float(seconds)


def declared_s(pod: Obj, cap: float = MAX_RUNTIME_S) -> float | None:
    """The pod's ``berth.dev/expected-runtime`` in seconds, at most ``cap`` (the policy's
    bound now; the webhook refused malformed and over-long values at CREATE); None when
    absent or unreadable."""
    seconds = parse_duration(tr.annotations_of(pod).get(c.ANNOTATION_EXPECTED_RUNTIME))
    return None if seconds is None else float(min(seconds, cap, MAX_RUNTIME_S))


def owner_job_key(pod: Obj) -> tuple[str, str] | None:
    """(``namespace/name``, uid) of the Job that controls the pod, from its owner reference."""
    for ref in tr.meta(pod).get("ownerReferences") or []:
        if (ref.get("kind") == "Job" and str(ref.get("apiVersion", "")).startswith("batch/")
                and ref.get("controller") and ref.get("name") and ref.get("uid")):
            return f"{tr.namespace(pod)}/{ref['name']}", str(ref["uid"])
    return None


def owner_job(pod: Obj, jobs: Mapping[str, Obj]) -> Obj | None:
    """The pod's controlling Job as the inventory holds it (the uid must match the owner
    reference: a Job recreated under the same name is another Job)."""
    found = owner_job_key(pod)
    if found is None:
        return None
    job = jobs.get(found[0])
    return job if job is not None and tr.meta(job).get("uid") == found[1] else None


def job_remaining_s(job: Obj, now: datetime) -> float | None:
    """Seconds until the Job controller ends the Job's pods (its deadline counted from its
    ``status.startTime``; the whole deadline when it has not started); None without a
    deadline or when it has passed."""
    deadline = _whole_seconds(tr.spec(job).get("activeDeadlineSeconds"))
    if deadline is None:
        return None
    started = tr.parse_time((job.get("status") or {}).get("startTime"))
    left = deadline - (0.0 if started is None else (now - started).total_seconds())
    return min(float(deadline), left) if left > 0 else None


def _since_start(pod: Obj, now: datetime) -> float:
    started = tr.parse_time((pod.get("status") or {}).get("startTime"))
    return 0.0 if started is None else max(0.0, (now - started).total_seconds())


def backfill_bound(pod: Obj, backend: str) -> Expected:
    """A pending pod's run time as a bound the tenant cannot stretch (module docstring): the
    smaller of its own deadline and Kueue's limit; :data:`UNKNOWN` without one. Never the
    Job's deadline, never an estimate."""
    found = [(s, src) for s, src in ((tr.active_deadline_s(pod), Source.POD_DEADLINE),
                                     (kueue_limit_s(pod, backend), Source.KUEUE))
             if s is not None]
    if not found:
        return UNKNOWN
    seconds, source = min(found, key=lambda f: f[0])
    return Expected(seconds, source)


def expected_end(pod: Obj, job: Obj | None, backend: str, now: datetime, *,
                 estimate_cap: float = MAX_RUNTIME_S, learned: float | None = None) -> Expected:
    """When a running (or released) pod ends, in seconds from ``now``: the earliest bound it
    has, else its declared estimate, at most ``estimate_cap``, else ``learned`` (the run time
    :class:`Learner` learned for its kind; module docstring). Kueue's limit and the estimates
    count from the pod's start (Kueue admitted the Workload before Berth released it, so this
    is no earlier than Kueue ends it); a pod not started has the whole of each ahead."""
    elapsed = _since_start(pod, now)
    bounds: list[tuple[float, Source]] = []
    own = tr.remaining_s(pod, now)  # 0 once past: the kubelet is ending it
    if own is not None:
        bounds.append((own, Source.POD_DEADLINE))
    limit = kueue_limit_s(pod, backend)
    if limit is not None and limit > elapsed:
        bounds.append((limit - elapsed, Source.KUEUE))
    job_left = job_remaining_s(job, now) if job is not None else None
    if job_left is not None:
        bounds.append((job_left, Source.JOB_DEADLINE))
    if bounds:
        seconds, source = min(bounds, key=lambda b: b[0])
        return Expected(min(seconds, MAX_WAIT_SECONDS), source)
    declared = declared_s(pod, estimate_cap)
    if declared is not None:
        # a declared estimate overrun is not replaced by a learned one: the pod said more
        return (Expected(declared - elapsed, Source.DECLARED) if declared > elapsed
                else UNKNOWN)
    if learned is not None and learned > elapsed:
        return Expected(min(learned - elapsed, MAX_WAIT_SECONDS), Source.LEARNED)
    # An estimate overrun says nothing of when the pod ends; read as 0 it would tell reclaim
    # the pod is being deleted (solver/reclaim.py). Unknown it is.
    return UNKNOWN


def release_annotations(expected: Expected, now: datetime) -> dict[str, str]:
    """What the release writes on a pod so that users see what Berth expects of it: the
    expected end (when known) and its source. Never read back by Berth."""
    out = {c.ANNOTATION_RUNTIME_SOURCE: str(expected.source)}
    if expected.remaining_s is not None:
        end = now + timedelta(seconds=min(expected.remaining_s, MAX_RUNTIME_S))
        out[c.ANNOTATION_EXPECTED_END] = tr.rfc3339(end)
    return out


# ------------------------------------------------------------------------------------------
# Run times learned from finished pods
# ------------------------------------------------------------------------------------------

#: Finished pods remembered as learned from, so that a pod's later events (its deletion, a
#: relist) count it once; the oldest are forgotten first.
LEARNED_UIDS = 100_000
#: The owner kind a pod is learned under when its controlling owner's kind is not a plain
#: name (a tenant writes its pods' owner references).
OTHER_OWNER = "Other"
_KIND_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789")


def _dict(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, dict) else {}


def _list(value: object) -> list[Any]:
    return value if isinstance(value, list) else []


def owner_kind(pod: Obj) -> str:
    """The kind of the pod's controlling owner ("Job", "JobSet"...), "Pod" for a pod nobody
    controls, :data:`OTHER_OWNER` for a kind that is not a plain name of at most 63 letters
    and digits."""
    for ref in _list(tr.meta(pod).get("ownerReferences")):
        if isinstance(ref, dict) and ref.get("controller"):
            kind = ref.get("kind")
            if isinstance(kind, str) and 0 < len(kind) <= 63 and set(kind) <= _KIND_CHARS:
                return kind
            return OTHER_OWNER
    return "Pod"


def run_seconds(pod: Obj) -> float | None:
    """How long a finished pod ran: from its ``status.startTime`` to the last of its
    containers' ``finishedAt`` (the kubelet writes both); None when either is missing or the
    end is before the start."""
    status = _dict(pod.get("status"))
    started = tr.parse_time(status.get("startTime"))
    ends = [tr.parse_time(_dict(_dict(_dict(cs).get("state")).get("terminated"))
                          .get("finishedAt")) for cs in _list(status.get("containerStatuses"))]
    known = [e for e in ends if e is not None]
    if started is None or not known:
        return None
    seconds = (max(known) - started).total_seconds()
    return seconds if seconds >= 0 else None


class Learner:
    """The run times of the pods Berth released that finished, by kind (solver/history.py),
    fed by the pod watch and read by each cycle's snapshot: thread-safe. ``observe`` learns
    from a pod once (by uid); ``estimate`` answers only while the policy turns learning on."""

    def __init__(self, settings: LearnedRuntimes | None = None) -> None:
        self._lock = threading.Lock()
        self._history = RunHistory(settings)
        self._seen: OrderedDict[str, None] = OrderedDict()

    def configure(self, settings: LearnedRuntimes) -> None:
        """A new policy: its settings from now on (what was learned stays)."""
        with self._lock:
            self._history.settings = settings

    @staticmethod
    def kind(pod: Obj, tenant: str) -> Kind | None:
        """The kind ``pod`` is learned and estimated under; None when its GPU count cannot
        be read."""
        try:
            gpus = tr.pod_gpu_demand(pod)[0]
        except ValueError:  # TranslationError included
            return None
        return Kind(tenant=tenant, owner=owner_kind(pod), gpus=gpus)

    def observe(self, pod: Obj, tenant: str | None) -> bool:
        """Learn from ``pod`` if it is a pod of ``tenant`` that Berth released and that ended
        Succeeded (a failed pod's run says nothing of how long its kind runs), once per pod.
        Returns True when it was learned from."""
        if (tenant is None or _dict(pod.get("status")).get("phase") != "Succeeded"
                or not tr.annotations_of(pod).get(c.ANNOTATION_ASSIGNED_NODE)):
            return False
        uid = str(tr.meta(pod).get("uid") or "")
        kind = self.kind(pod, tenant)
        seconds = run_seconds(pod)
        if not uid or kind is None or seconds is None:
            return False
        with self._lock:
            if uid in self._seen:
                return False
            self._seen[uid] = None
            while len(self._seen) > LEARNED_UIDS:
                self._seen.popitem(last=False)
            return self._history.record(kind, seconds)

    def estimate(self, pod: Obj, tenant: str | None) -> float | None:
        """The learned run time of ``pod``'s kind (None: learning off, too few finished, or
        no tenant). While learning is off nothing of the pod is read: the snapshot asks this of
        every running pod each cycle."""
        if tenant is None or not self._history.settings.enabled:
            return None
        kind = self.kind(pod, tenant)
        if kind is None:
            return None
        with self._lock:
            return self._history.estimate(kind)

    def kinds(self) -> int:
        with self._lock:
            return self._history.kinds()
