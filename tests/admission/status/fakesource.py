"""The status commands' :class:`~admission.status.source.Source` over the controller tests'
in-memory API server (tests/admission/controller/fakeapi.py), with RBAC refusals on demand."""

from __future__ import annotations

import copy
from collections.abc import Iterable

from admission.status import keys
from admission.status.source import Denied, Json, Missing, Request
from tests.admission.controller.fakeapi import FakeApi

POLICY_TEXT = """\
apiVersion: berth.dev/v1alpha1
kind: Policy
tenants:
  - name: team-a
    namespaces: [team-a]
    quota: {gpus: 8}
    weight: 2
    borrowing: {enabled: false}
  - name: team-b
    namespaces: [team-b]
    quota: {gpus: 8}
    borrowing: {enabled: true, limitGpus: 4}
  - name: team-c
    namespaces: [team-c]
    quota: {gpus: 8}
topology:
  levels:
    - name: nvlink
    - name: node
      nodeLabel: kubernetes.io/hostname
    - name: rack
      nodeLabel: topology.kubernetes.io/rack
batch:
  windowSeconds: 10
"""


class FakeSource:
    """``forbid``: (verb, resource, namespace) triples answered 403; namespace None is the
    cluster-wide request (or a cluster-scoped resource). ``unauthorized``: every call 401."""

    def __init__(self, api: FakeApi, *, policy_text: str | None = POLICY_TEXT,
                 forbid: Iterable[tuple[str, str, str | None]] = (),
                 unauthorized: bool = False) -> None:
        self.api = api
        self.config_maps: dict[str, Json] = {}
        if policy_text is not None:
            self.config_maps[f"{keys.BERTH_NAMESPACE}/{keys.POLICY_CONFIG_MAP}"] = {
                "data": {keys.POLICY_KEY: policy_text}}
        self.leases: dict[str, Json] = {}
        self.custom: dict[str, Json] = {}
        self.forbid = set(forbid)
        self.unauthorized = unauthorized
        self.calls: list[Request] = []

    def _ask(self, req: Request) -> None:
        self.calls.append(req)
        if self.unauthorized:
            raise Denied(401, "Unauthorized", req)
        if (req.verb, req.resource, req.namespace) in self.forbid:
            raise Denied(403, f"{req.resource} is forbidden: User \"alice\" cannot "
                              f"{req.verb} resource \"{req.resource}\"", req)

    def list_pods(self, namespace: str | None) -> list[Json]:
        self._ask(Request("list", "pods", namespace))
        pods, _ = self.api.list_pods()
        return [p for p in pods if namespace is None or p["metadata"]["namespace"] == namespace]

    def list_nodes(self) -> list[Json]:
        self._ask(Request("list", "nodes", None, cluster_scoped=True))
        return self.api.list_nodes()[0]

    def list_dra(self, kind: str) -> list[Json]:
        self._ask(Request("list", f"{kind}.resource.k8s.io", None, cluster_scoped=True))
        return self.api.list_dra(kind)[0]

    def get_pod(self, namespace: str, name: str) -> Json:
        self._ask(Request("get", "pods", namespace, name=name))
        pod = self.api.get_pod(namespace, name)
        if pod is None:
            raise Missing(404, f'pods "{name}" not found')
        return pod

    def get_config_map(self, namespace: str, name: str) -> Json:
        self._ask(Request("get", "configmaps", namespace, name=name))
        try:
            return copy.deepcopy(self.config_maps[f"{namespace}/{name}"])
        except KeyError:
            raise Missing(404, f'configmaps "{name}" not found') from None

    def get_lease(self, namespace: str, name: str) -> Json:
        self._ask(Request("get", "leases", namespace, name=name))
        lease = self.api.get_lease(namespace, name) or self.leases.get(f"{namespace}/{name}")
        if lease is None:
            raise Missing(404, f'leases "{name}" not found')
        return lease

    def list_events(self, namespace: str | None, field_selector: str) -> list[Json]:
        self._ask(Request("list", "events", namespace))
        want = dict(part.split("=", 1) for part in field_selector.split(",") if part)
        out = []
        for ev in self.api.events:
            ns = ev.get("metadata", {}).get("namespace") or ev["involvedObject"]["namespace"]
            if namespace is not None and ns != namespace:
                continue
            fields = {"reason": ev.get("reason"),
                      "involvedObject.name": ev["involvedObject"].get("name")}
            if all(fields.get(k) == v for k, v in want.items()):
                out.append(copy.deepcopy(ev))
        return out

    def get_custom(self, group: str, version: str, plural: str, namespace: str,
                   name: str) -> Json:
        self._ask(Request("get", f"{plural}.{group}", namespace, name=name))
        try:
            return copy.deepcopy(self.custom[f"{plural}/{namespace}/{name}"])
        except KeyError:
            raise Missing(404, "not found") from None
