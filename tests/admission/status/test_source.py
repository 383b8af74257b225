"""The status commands' reads over the ``kubernetes`` client: refusals typed with what was
asked, lists paged, the user's kubeconfig and context; and the kubectl plugin entry."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from admission import kubectl_berth
from admission.status.source import Denied, KubeSource, Missing, SourceError, Unreachable, connect
from tests.admission.status.scene import quota_scene
from tests.admission.status.test_status import _connect

REPO = Path(__file__).resolve().parents[3]


class Raw:
    def __init__(self, data: dict[str, Any]) -> None:
        self.data = json.dumps(data).encode()


def refused(status: int, message: str) -> ApiException:
    exc = ApiException(status=status, reason="Forbidden")
    exc.body = json.dumps({"kind": "Status", "message": message, "code": status})
    return exc


def source_with(**methods: Any) -> KubeSource:
    from kubernetes import client

    src = KubeSource(client.ApiClient(client.Configuration()))
    for name, fn in methods.items():
        setattr(src.core, name, fn)
    return src


def test_forbidden_list_names_the_request() -> None:
    def list_namespaced_pod(namespace: str, **kw: Any) -> Raw:
        raise refused(403, f'pods is forbidden: User "alice" cannot list resource "pods" in '
                           f'API group "" in the namespace "{namespace}"')

    src = source_with(list_namespaced_pod=list_namespaced_pod)
    with pytest.raises(Denied) as err:
        src.list_pods("team-b")
    assert err.value.status == 403 and 'User "alice"' in err.value.message
    assert err.value.advice() == ("your user cannot list pods in namespace team-b (403); ask "
                                  "your cluster admin for 'list' on pods through a Role or "
                                  "RoleBinding in namespace team-b")


def test_other_statuses() -> None:
    def read(name: str, namespace: str, **kw: Any) -> Raw:
        raise {"a": refused(404, "not found"), "b": refused(401, "Unauthorized"),
               "c": refused(500, "etcd down")}[name]

    src = source_with(read_namespaced_pod=read)
    with pytest.raises(Missing):
        src.get_pod("ns", "a")
    with pytest.raises(Denied) as err:
        src.get_pod("ns", "b")
    assert "did not accept your credentials (401)" in err.value.advice()
    with pytest.raises(SourceError) as other:
        src.get_pod("ns", "c")
    assert (other.value.status, other.value.message) == (500, "etcd down")


def test_lists_are_paged() -> None:
    calls: list[dict[str, Any]] = []

    def list_node(**kw: Any) -> Raw:
        calls.append(kw)
        if "_continue" not in kw:
            return Raw({"items": [{"metadata": {"name": "n0"}}],
                        "metadata": {"continue": "tok"}})
        return Raw({"items": [{"metadata": {"name": "n1"}}], "metadata": {}})

    src = source_with(list_node=list_node)
    assert [n["metadata"]["name"] for n in src.list_nodes()] == ["n0", "n1"]
    assert [c.get("_continue") for c in calls] == [None, "tok"]
    assert all(c["limit"] == 500 and c["_preload_content"] is False for c in calls)


def _kubeconfig(path: Path, server: str = "https://127.0.0.1:1") -> Path:
    path.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "dev",
        "clusters": [{"name": "c", "cluster": {"server": server,
                                               "insecure-skip-tls-verify": True}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "dev", "context": {"cluster": "c", "user": "u",
                                                 "namespace": "team-a"}},
                     {"name": "prod", "context": {"cluster": "c", "user": "u"}}]}))
    return path


def test_connect_uses_the_kubeconfig_its_context_and_namespace(tmp_path: Path) -> None:
    kc = _kubeconfig(tmp_path / "kc")
    assert connect(str(kc)).namespace == "team-a"
    assert connect(str(kc), "prod").namespace == "default"
    with pytest.raises(SourceError, match=r"cannot use the kubeconfig .* \(context nope\)"):
        connect(str(kc), "nope")


def test_no_answer_is_unreachable(tmp_path: Path) -> None:
    conn = connect(str(_kubeconfig(tmp_path / "kc")))
    conn.source.timeout = 2  # type: ignore[attr-defined]
    with pytest.raises(Unreachable, match="no answer from the API server"):
        conn.source.list_nodes()


def test_kubectl_plugin_entry(monkeypatch: pytest.MonkeyPatch,
                              capsys: pytest.CaptureFixture[str]) -> None:
    scripts = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts["kubectl-berth"] == "admission.kubectl_berth:main"
    s = quota_scene()
    _connect(monkeypatch, s.source(), s)
    assert kubectl_berth.main(["status", "-o", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["waiting"][0]["gang"] == "team-a/w1"
    assert kubectl_berth.main(["explain", "w1-0", "-o", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["state"] == "waiting"
    forbid = {("list", "pods", ns) for ns in (None, "team-a", "team-b", "team-c")}
    _connect(monkeypatch, s.source(forbid=forbid), s)
    assert kubectl_berth.main(["status"]) == 2
    assert capsys.readouterr().err.startswith("kubectl berth status: your user cannot list")
    with pytest.raises(SystemExit):  # only the read-only commands
        kubectl_berth.main(["serve"])
