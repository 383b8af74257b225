"""Reading the cluster once for a status or an explanation: the policy, pods, nodes, and the
few Events and objects that say more, with what the user's RBAC let it read.

Pods are listed cluster-wide; when that is forbidden, namespace by namespace over the
policy's namespaces, skipping (and naming) those the user may not read. Nodes, the Lease and
Events are optional: without them the report says what it could not judge. Only the policy
and at least one namespace of pods are required; without them the read fails with
:class:`StatusError`, whose message says what to ask for.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from admission import constants as c
from admission.controller.api import DRA_KINDS
from admission.policy import Policy, PolicyError, check_text, load_policy
from admission.status import keys
from admission.status.source import Denied, Json, Missing, Source, SourceError


class StatusError(Exception):
    """Nothing useful can be shown: one line saying why and what to do."""


@dataclass(slots=True)
class ClusterView:
    """What was read, and what could not be."""

    policy: Policy
    policy_source: str
    pods: list[Json]
    nodes: list[Json] | None  # None: the user may not list nodes
    namespaces: tuple[str, ...] | None  # None: pods of every namespace were read
    skipped: dict[str, str] = field(default_factory=dict)  # namespace -> why it was not read
    lease: Json | None = None
    lease_error: str | None = None
    events: list[Json] = field(default_factory=list)  # reclaim Events
    dra: dict[str, list[Json]] = field(default_factory=dict)  # DRA objects by kind
    notes: list[str] = field(default_factory=list)


def refusal(exc: SourceError) -> str:
    if isinstance(exc, Denied):
        return exc.advice()
    return exc.message if exc.status == 0 else f"the API server answered {exc.status}: " \
                                                f"{exc.message}"


def read_policy(source: Source, path: str | None, namespace: str) -> tuple[Policy, str]:
    """The policy from ``path``, else from the ConfigMap config/base deploys."""
    if path:
        try:
            return load_policy(path), path
        except PolicyError as exc:
            raise StatusError(f"--policy: the policy is not valid:\n{exc}") from None
    where = f"ConfigMap {namespace}/{keys.POLICY_CONFIG_MAP}"
    try:
        cm = source.get_config_map(namespace, keys.POLICY_CONFIG_MAP)
    except Denied as exc:
        raise StatusError(f"{exc.advice()}; or pass --policy FILE (the policy Berth runs "
                          "with)") from None
    except Missing:
        raise StatusError(f"no {where} (Berth's policy as config/base deploys it); pass "
                          "--policy FILE, or --berth-namespace NS where Berth is "
                          "installed") from None
    except SourceError as exc:
        raise StatusError(refusal(exc)) from None
    text = (cm.get("data") or {}).get(keys.POLICY_KEY)
    if text is None:
        raise StatusError(f"{where} has no key {keys.POLICY_KEY}; pass --policy FILE")
    policy, issues = check_text(text)
    if policy is None:
        lines = "\n".join(i.render(where) for i in issues)
        raise StatusError(f"{where}: the policy is not valid:\n{lines}")
    return policy, where


def read_pods(source: Source, namespaces: Iterable[str]
              ) -> tuple[list[Json], tuple[str, ...] | None, dict[str, str]]:
    """Pods of every namespace, or of each of ``namespaces`` the user may list."""
    try:
        return source.list_pods(None), None, {}
    except Denied as exc:
        if exc.status == 401:
            raise StatusError(exc.advice()) from None
        first = exc
    except SourceError as exc:
        raise StatusError(refusal(exc)) from None
    pods: list[Json] = []
    read: list[str] = []
    skipped: dict[str, str] = {}
    for ns in sorted(set(namespaces)):
        try:
            pods.extend(source.list_pods(ns))
            read.append(ns)
        except Denied as exc:
            if exc.status == 401:
                raise StatusError(exc.advice()) from None
            skipped[ns] = f"cannot list pods ({exc.status})"
        except SourceError as exc:
            raise StatusError(refusal(exc)) from None
    if not read:
        names = ", ".join(sorted(skipped)) or "(the policy names none)"
        raise StatusError(f"your user cannot list pods in all namespaces nor in namespace "
                          f"{names} ({first.status}); ask your cluster admin for 'list' on "
                          "pods there (e.g. a RoleBinding to the 'view' ClusterRole)")
    return pods, tuple(read), skipped


def read(source: Source, *, policy_path: str | None, berth_namespace: str = keys.BERTH_NAMESPACE,
         events: bool = True) -> ClusterView:
    policy, policy_source = read_policy(source, policy_path, berth_namespace)
    pods, namespaces, skipped = read_pods(source, policy.managed_namespaces)
    view = ClusterView(policy=policy, policy_source=policy_source, pods=pods, nodes=None,
                       namespaces=namespaces, skipped=skipped)
    if skipped:
        view.notes.append(
            f"pods of namespace {', '.join(sorted(skipped))} were not read (your user may not "
            "list them): their tenants' usage and waiting gangs are missing")
    if namespaces is not None:
        view.notes.append("pods outside the policy's namespaces were not read (no cluster-wide "
                          "list): GPUs they hold are not counted, so free capacity may be "
                          "less than shown")
    try:
        view.nodes = source.list_nodes()
    except SourceError as exc:
        view.notes.append(f"nodes not read ({refusal(exc)}): GPUs held are counted from the "
                          "pods' own requests and free capacity is unknown")
    view.dra = read_dra(source, view.notes)
    try:
        view.lease = source.get_lease(berth_namespace, keys.LEASE)
    except Missing:
        view.lease_error = f"no Lease {berth_namespace}/{keys.LEASE}: no controller has led"
    except SourceError as exc:
        view.lease_error = f"unknown ({refusal(exc)})"
    if events:
        view.events = read_events(source, namespaces, view.notes,
                                  f"reason={keys.REASON_RECLAIMED}")
    return view


def read_dra(source: Source, notes: list[str]) -> dict[str, list[Json]]:
    """DeviceClasses, ResourceSlices and claims (GPUs through DRA); a cluster that does not serve
    resource.k8s.io/v1 has none, and one the user may not list gets a note."""
    out: dict[str, list[Json]] = {}
    for kind in DRA_KINDS:
        try:
            out[kind] = source.list_dra(kind)
        except Missing:
            out[kind] = []
        except SourceError as exc:
            notes.append(f"{kind} not read ({refusal(exc)}): GPUs through DRA are not shown")
            out[kind] = []
    return out


def read_events(source: Source, namespaces: tuple[str, ...] | None, notes: list[str],
                selector: str) -> list[Json]:
    """Events matching ``selector`` where the user may list them (a note where not)."""
    try:
        if namespaces is None:
            return source.list_events(None, selector)
        out: list[Json] = []
        for ns in namespaces:
            out.extend(source.list_events(ns, selector))
        return out
    except SourceError as exc:
        notes.append(f"events not read ({refusal(exc)}): recent reclaims cannot be shown")
        return []


@dataclass(slots=True)
class PodRead:
    """The pod ``berth explain`` is about, read by name, and what is said about it."""

    pod: Json
    events: list[Json] = field(default_factory=list)
    events_error: str | None = None
    podgroup: Json | None = None
    podgroup_error: str | None = None


VOLCANO_PODGROUP = ("scheduling.volcano.sh", "v1beta1", "podgroups")


def read_pod(source: Source, namespace: str, name: str) -> PodRead:
    try:
        pod = source.get_pod(namespace, name)
    except Missing:
        raise StatusError(f"no pod {name} in namespace {namespace} (pass -n NAMESPACE)") \
            from None
    except SourceError as exc:
        raise StatusError(refusal(exc)) from None
    out = PodRead(pod=pod)
    meta = pod.get("metadata") or {}
    try:
        uid = meta.get("uid")
        out.events = [e for e in source.list_events(namespace, f"involvedObject.name={name}")
                      if not uid or (e.get("involvedObject") or {}).get("uid") in (None, uid)]
    except SourceError as exc:
        out.events_error = f"not read ({refusal(exc)})"
    spec = pod.get("spec") or {}
    group = (meta.get("annotations") or {}).get(c.VOLCANO_GROUP_ANNOTATION)
    if spec.get("schedulerName") == c.VOLCANO_SCHEDULER and group:
        try:
            out.podgroup = source.get_custom(*VOLCANO_PODGROUP, namespace, group)
        except SourceError as exc:
            out.podgroup_error = refusal(exc)
    return out


def with_pod(view: ClusterView, pod: Json) -> None:
    """Put the pod as just read into the view (its namespace may not have been listed)."""
    meta = pod.get("metadata") or {}
    key = (meta.get("namespace"), meta.get("name"))
    view.pods = [p for p in view.pods
                 if ((p.get("metadata") or {}).get("namespace"),
                     (p.get("metadata") or {}).get("name")) != key] + [pod]
