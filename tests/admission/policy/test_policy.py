"""Policy loading: the sample files load, every error of a broken file is reported at once with
its path and line, and the solver receives the knobs the file sets."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from admission.cli import main
from admission.policy import PolicyError, check_text, load_policy, to_solver

ROOT = Path(__file__).resolve().parents[3]
SAMPLE = ROOT / "config" / "policy" / "sample-policy.yaml"
MINIMAL = ROOT / "config" / "policy" / "minimal-policy.yaml"


def _issues(text: str) -> dict[str, tuple[int | None, str]]:
    policy, issues = check_text(textwrap.dedent(text))
    assert policy is None
    return {i.path: (i.line, i.message) for i in issues}


def test_sample_policy_manages_team_a_and_team_b() -> None:
    policy = load_policy(SAMPLE)
    assert policy.tenant_for_namespace("team-a").name == "team-a"  # type: ignore[union-attr]
    assert policy.tenant_for_namespace("team-b").name == "team-b"  # type: ignore[union-attr]
    assert policy.tenant_for_namespace("kube-system") is None
    assert len(policy.generation) == 12


def test_minimal_policy_takes_defaults() -> None:
    policy = load_policy(MINIMAL)
    assert policy.sharing.backend == "none"
    assert policy.release.backend == "standalone"
    assert [lv.name for lv in policy.topology.levels] == ["nvlink", "node", "rack", "block"]


def test_every_error_is_reported_with_path_and_line() -> None:
    issues = _issues(
        """\
        apiVersion: berth.dev/v1alpha1
        kind: Policy
        tenants:
          - name: team-a
            namespaces: [team-a]
          - name: team-b
            namespaces: [team-a]
            defaultQosClass: gold
          - name: team-c
            namespaces: [team-c]
            quota:
              gpus: -1
            wieght: 2
        sharing:
          backend: time-slicing
          fractionGrid: [0.3, 1.0]
        batch:
          windowSeconds: 0
        """
    )
    assert issues["tenants[2].quota.gpus"] == (12, "must be >= 0, got -1")
    assert issues["tenants[2].wieght"][0] == 13
    assert "unknown field" in issues["tenants[2].wieght"][1]
    assert issues["tenants[1].namespaces[0]"][0] == 7
    assert "already belongs to tenant 'team-a'" in issues["tenants[1].namespaces[0]"][1]
    assert "unknown QoS class 'gold'" in issues["tenants[1].defaultQosClass"][1]
    assert "multiples of 1/4" in issues["sharing.fractionGrid[0]"][1]
    assert issues["batch.windowSeconds"] == (18, "must be > 0, got 0")
    assert len(issues) == 6


def test_kueue_release_needs_a_queue_per_tenant() -> None:
    issues = _issues(
        """\
        tenants:
          - {name: team-a, namespaces: [team-a], queues: {kueue: qa}}
          - {name: team-b, namespaces: [team-b]}
        release: {backend: kueue}
        """
    )
    assert list(issues) == ["tenants[1].queues.kueue"]
    assert "LocalQueue" in issues["tenants[1].queues.kueue"][1]


def test_duplicate_keys_and_bad_enums() -> None:
    issues = _issues(
        """\
        tenants:
          - {name: team-a, namespaces: [team-a]}
        release: {backend: slurm}
        release: {backend: kueue}
        """
    )
    assert issues["release"][0] == 4 and "duplicate key" in issues["release"][1]
    # PyYAML kept the last value, so the enum error is about 'kueue's missing queue, not slurm.
    assert "tenants[0].queues.kueue" in issues


def test_latency_sensitive_class_needs_slo() -> None:
    issues = _issues(
        """\
        tenants: [{name: team-a, namespaces: [team-a]}]
        qosClasses:
          - {name: inference, latencySensitive: true, soloLatencyMs: 20}
          - {name: serving, soloLatencyMs: 20, sloMs: 10}
        """
    )
    assert "needs soloLatencyMs and sloMs" in issues["qosClasses[0]"][1]
    assert "must be >= soloLatencyMs" in issues["qosClasses[1]"][1]


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("", "the file is empty"),
        ("- a\n- b\n", "top level must be a mapping"),
        ("tenants: [\n", "not valid YAML"),
        ("kind: Policy\n", "tenants: required field is missing"),
    ],
)
def test_degenerate_files(text: str, needle: str) -> None:
    policy, issues = check_text(text)
    assert policy is None
    assert needle in "\n".join(i.render() for i in issues)


def test_load_policy_raises_with_every_issue(tmp_path: Path) -> None:
    bad = tmp_path / "p.yaml"
    bad.write_text("tenants:\n  - {name: Team_A, namespaces: []}\n")
    with pytest.raises(PolicyError) as err:
        load_policy(bad)
    rendered = str(err.value)
    assert f"{bad}:2:" in rendered
    assert "tenants[0].name" in rendered and "tenants[0].namespaces" in rendered


def test_to_solver_maps_quota_borrowing_and_classes() -> None:
    solver_policy, tenants = to_solver(load_policy(SAMPLE))
    a, b = tenants
    assert (a.quota_milli, a.weight, a.can_borrow, a.borrow_limit_milli) == (16000, 2, True, 8000)
    assert (b.quota_milli, b.can_borrow, b.borrow_limit_milli) == (8000, False, None)
    assert solver_policy.topology_levels == ("nvlink", "node", "rack", "block")
    inference = solver_policy.qos("inference")
    assert inference is not None and inference.slo_ms == 50
    assert "training" in inference.no_share_with
    assert solver_policy.active_watts["NVIDIA-H100-80GB-HBM3"] == 700


def test_policy_check_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["policy", "check", str(SAMPLE)]) == 0
    bad = tmp_path / "bad.yaml"
    bad.write_text("tenants:\n  - name: team-a\n    namespaces: [team-a]\n    weight: 0\n")
    assert main(["policy", "check", str(bad)]) == 2
    out = capsys.readouterr().out
    assert f"{bad}:4:5: tenants[0].weight: must be > 0, got 0" in out
    assert main(["policy", "check", str(tmp_path / "missing.yaml")]) == 2


yaml_scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-5, 5), st.floats(-2, 2, allow_nan=False),
    st.text(max_size=8),
)
yaml_values = st.recursive(
    yaml_scalars,
    lambda inner: st.lists(inner, max_size=3)
    | st.dictionaries(
        st.sampled_from(["name", "namespaces", "quota", "gpus", "weight", "tenants", "sharing",
                         "backend", "fractionGrid", "qosClasses", "release", "x"]),
        inner, max_size=4),
    max_leaves=12,
)


@settings(max_examples=150, deadline=None)
@given(yaml_values)
def test_random_documents_never_crash(doc: object) -> None:
    import yaml

    policy, issues = check_text(yaml.safe_dump(doc))
    assert (policy is None) == bool(issues)
    for issue in issues:
        assert issue.message


@settings(max_examples=150, deadline=None)
@given(st.text(max_size=200))
def test_random_text_never_crashes(text: str) -> None:
    policy, issues = check_text(text)
    assert (policy is None) == bool(issues)
