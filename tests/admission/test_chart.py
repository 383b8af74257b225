"""The Helm chart in charts/berth is config/ as kustomize renders it, for every choice.

- the committed chart is what ``berth chart`` renders from config/ (``berth chart --check``);
- ``helm template`` of each combination of the chart's choices (48) renders, object for object,
  what ``kubectl kustomize`` renders of the same composition of base, components and overlays;
- in another release namespace nothing still says berth-system, and the webhook still spares
  Berth's own namespace;
- values the chart sets (image, replicas, resources, policy) land where kustomize has them;
- bad values are refused by Helm with the field named: an unknown backend, replicas 0, a
  misspelt key, a policy that is not YAML or that names another backend.

kubectl and helm are found on PATH, else the ones e2e/build.sh builds (it is run here if they are
not built yet: a few minutes, once).
"""

from __future__ import annotations

import shutil
import subprocess
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from admission import chart
from admission.chart import CHOICES, Variant, as_values, canonical, helm_set_args, variants
from admission.devcluster.binaries import MissingBinary, built_binary

ROOT = Path(__file__).resolve().parents[2]
CHART_DIR = ROOT / chart.CHART


def _tool(name: str) -> str:
    found = shutil.which(name)
    if found:
        return found
    try:
        return str(built_binary(name))  # e2e/build.sh, once, when it is not built yet
    except MissingBinary as exc:
        pytest.fail(f"{name} is needed to render the chart and config/: {exc}", pytrace=False)


@pytest.fixture(scope="module")
def kubectl() -> str:
    return _tool("kubectl")


@pytest.fixture(scope="module")
def helm() -> str:
    return _tool("helm")


def helm_template(helm: str, *args: str, namespace: str = "berth-system",
                  check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run([helm, "template", "berth", str(CHART_DIR), "--namespace", namespace,
                           *args], capture_output=True, text=True, timeout=120, check=False)
    if check:
        assert proc.returncode == 0, f"helm template {' '.join(args)} failed:\n{proc.stderr}"
    return proc


def objects(text: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(text) if d]


def one(docs: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    found = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name]
    assert len(found) == 1, f"expected one {kind}/{name}, found {len(found)}"
    return found[0]


def _name(variant: Variant) -> str:
    return ",".join(f"{k}={v}" for k, v in as_values(variant).items())


def test_chart_is_current(kubectl: str) -> None:
    stale = chart.stale(ROOT, kubectl)
    assert not stale, f"charts/berth is stale (run `berth chart`): {stale}"


def test_every_combination_is_rendered() -> None:
    every = variants()
    assert len(every) == len(set(every)) == 2 * 3 * 2 * 2 * 2
    assert every[0] == tuple(c.default for c in CHOICES)


@pytest.mark.parametrize("variant", variants(), ids=_name)
def test_helm_renders_what_kustomize_renders(kubectl: str, helm: str, variant: Variant) -> None:
    expected = chart.render_kustomize(variant, ROOT / "config", kubectl)
    got = objects(helm_template(helm, *helm_set_args(variant), "--set",
                                "namespace.create=true").stdout)
    want_c, got_c = Counter(map(canonical, expected)), Counter(map(canonical, got))
    missing = [chart.object_key(yaml.safe_load(o)) for o in want_c - got_c]
    extra = [chart.object_key(yaml.safe_load(o)) for o in got_c - want_c]
    assert not missing and not extra, f"{_name(variant)}: kustomize only {missing}; " \
                                      f"helm only {extra}"


def test_namespace_object_only_when_asked(helm: str) -> None:
    kinds = [d["kind"] for d in objects(helm_template(helm).stdout)]
    assert "Namespace" not in kinds
    kinds = [d["kind"] for d in objects(helm_template(helm, "--set",
                                                      "namespace.create=true").stdout)]
    assert kinds.count("Namespace") == 1


@pytest.mark.parametrize("certificates", ["self-signed", "cert-manager"])
def test_another_release_namespace(helm: str, certificates: str) -> None:
    out = helm_template(helm, "--set", f"certificates={certificates}", "--set",
                        "networkPolicy.enabled=true", namespace="gpu-admission").stdout
    assert "berth-system" not in out
    docs = objects(out)
    hook = one(docs, "MutatingWebhookConfiguration", "berth")
    (expression,) = hook["webhooks"][0]["namespaceSelector"]["matchExpressions"]
    assert expression["operator"] == "NotIn" and "gpu-admission" in expression["values"]
    assert hook["webhooks"][0]["clientConfig"]["service"]["namespace"] == "gpu-admission"
    for doc in docs:
        if doc["kind"] in ("ClusterRoleBinding", "RoleBinding"):
            for subject in doc["subjects"]:
                if subject["kind"] == "ServiceAccount":
                    assert subject["namespace"] == "gpu-admission", doc["metadata"]["name"]
        if doc["kind"] in ("Deployment", "DaemonSet", "Service", "ConfigMap", "Role"):
            assert doc["metadata"]["namespace"] == "gpu-admission", doc["metadata"]["name"]
    if certificates == "cert-manager":
        cert = one(docs, "Certificate", "berth-webhook")
        assert "berth-webhook.gpu-admission.svc" in cert["spec"]["dnsNames"]
        assert hook["metadata"]["annotations"]["cert-manager.io/inject-ca-from"] == \
            "gpu-admission/berth-webhook"


def test_values_land_where_kustomize_has_them(helm: str, tmp_path: Path) -> None:
    policy = tmp_path / "policy.yaml"
    text = ("apiVersion: berth.dev/v1alpha1\nkind: Policy\n# a comment survives\n"
            "tenants:\n  - name: ml\n    namespaces: [ml]\n\n    quota: {gpus: 8}\n")
    policy.write_text(text)
    docs = objects(helm_template(
        helm, "--set", "image.repository=registry.example/berth", "--set", "image.tag=0.1.0",
        "--set", "image.pullPolicy=Always", "--set", "replicas=3",
        "--set", "resources.requests.cpu=2", "--set", "resources.limits.memory=8Gi",
        "--set", "agent.resources.requests.cpu=50m", "--set-file", f"policy={policy}").stdout)
    deploy = one(docs, "Deployment", "berth")
    assert deploy["spec"]["replicas"] == 3
    (ctr,) = deploy["spec"]["template"]["spec"]["containers"]
    assert ctr["image"] == "registry.example/berth:0.1.0" and ctr["imagePullPolicy"] == "Always"
    assert ctr["resources"]["requests"]["cpu"] == 2
    assert ctr["resources"]["limits"]["memory"] == "8Gi"
    (agent,) = one(docs, "DaemonSet", "berth-agent")["spec"]["template"]["spec"]["containers"]
    assert agent["image"] == "registry.example/berth:0.1.0"
    assert agent["resources"]["requests"]["cpu"] == "50m"
    assert one(docs, "ConfigMap", "berth-policy")["data"]["policy.yaml"] == text


@pytest.mark.parametrize(("args", "says"), [
    (["--set", "backend=slurm"], "backend"),
    (["--set", "certificates=letsencrypt"], "certificates"),
    (["--set", "replicas=0"], "replicas"),
    (["--set", "replica=3"], "replica"),
    (["--set", "image.pullPolicy=Sometimes"], "pullPolicy"),
    (["--set", "agent.enabled=maybe"], "enabled"),
    (["--set", "resources.requests.cpu="], "cpu"),
])
def test_bad_values_are_refused_by_name(helm: str, args: list[str], says: str) -> None:
    proc = helm_template(helm, *args, check=False)
    assert proc.returncode != 0, f"{args} was accepted"
    assert says in proc.stderr, proc.stderr
    assert "panic" not in proc.stderr and "goroutine" not in proc.stderr


@pytest.mark.parametrize(("policy", "says"), [
    ("tenants: [unclosed\n", "values.policy is not a YAML mapping"),
    ("release: {backend: volcano}\ntenants: []\n",
     'values.backend is "standalone" but the policy\'s release.backend is "volcano"'),
])
def test_bad_policy_is_refused(helm: str, tmp_path: Path, policy: str, says: str) -> None:
    path = tmp_path / "policy.yaml"
    path.write_text(policy)
    proc = helm_template(helm, "--set-file", f"policy={path}", check=False)
    assert proc.returncode != 0 and says in proc.stderr, proc.stderr


def test_backend_policy_mismatch_with_sample_policy_is_impossible(helm: str) -> None:
    # Each backend's sample policy names that backend, so the defaults always render.
    for backend in ("standalone", "kueue", "volcano"):
        docs = objects(helm_template(helm, "--set", f"backend={backend}").stdout)
        text = one(docs, "ConfigMap", "berth-policy")["data"]["policy.yaml"]
        named = (yaml.safe_load(text).get("release") or {}).get("backend", "standalone")
        assert named == backend


_TEXT = st.lists(st.text(st.characters(blacklist_categories=("Cs", "Cc")), max_size=8)
                 | st.sampled_from(["\n", "\t", " ", "{{", "}}", "---", "'", '"', "#", ": ", "|",
                                    "\\", "{{ .Values.image.tag }}"]),
                 max_size=12).map("".join)


@settings(max_examples=15, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(note=_TEXT, lead=st.sampled_from(["", "  "]), trailer=st.sampled_from(["", "\n", "\n\n"]))
def test_any_policy_text_reaches_the_configmap_as_written(helm: str, tmp_path: Path, note: str,
                                                         lead: str, trailer: str) -> None:
    # The policy ConfigMap holds the admin's text exactly (comments, quoting, template-like
    # braces, a first line indented), except that it ends with one newline.
    body = yaml.safe_dump({"apiVersion": "berth.dev/v1alpha1", "kind": "Policy",
                           "release": {"backend": "standalone"}, "note": note,
                           "tenants": [{"name": "a", "namespaces": ["a"]}]})
    text = "".join(lead + line + "\n" for line in body.splitlines()) + trailer
    path = tmp_path / "policy.yaml"
    path.write_text(text)
    docs = objects(helm_template(helm, "--set-file", f"policy={path}").stdout)
    got = one(docs, "ConfigMap", "berth-policy")["data"]["policy.yaml"]
    assert got == text.rstrip("\n") + "\n"
    assert yaml.safe_load(got)["note"] == note
