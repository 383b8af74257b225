"""The policy file as an attacker (or a tired admin) may write it: numbers that are infinite,
huge or not numbers, a priority beyond its bound, duplicate keys, an alias bomb, a recursive
document. Each is refused by `berth policy check` with its path and the fix, quickly."""

from __future__ import annotations

import textwrap
import time

import pytest

from admission.policy import check_text
from admission.policy.solver_view import to_solver
from solver.types import SolverPolicy

BASE = "tenants: [{name: team-a, namespaces: [team-a]}]\n"


def _issues(text: str) -> dict[str, str]:
    policy, issues = check_text(textwrap.dedent(text))
    assert policy is None, "expected the policy to be refused"
    return {i.path: i.message for i in issues}


def _solver_policy(text: str) -> SolverPolicy:
    """What the solver is given for a policy that must be accepted."""
    policy, issues = check_text(text)
    assert policy is not None, issues
    return to_solver(policy)[0]


NUMBERS = [
    ("tenants[0].quota.gpus", "tenants: [{name: team-a, namespaces: [team-a], quota: {gpus: X}}]"),
    ("tenants[0].borrowing.limitGpus",
     "tenants: [{name: team-a, namespaces: [team-a], borrowing: {limitGpus: X}}]"),
    ("tenants[0].weight", "tenants: [{name: team-a, namespaces: [team-a], weight: X}]"),
    ("gpuModels[0].activeWatts", BASE + "gpuModels: [{name: m, memoryMiB: 10, activeWatts: X}]"),
    ("gpuModels[0].memoryMiB", BASE + "gpuModels: [{name: m, memoryMiB: X}]"),
    ("qosClasses[0].sloMs", BASE + "qosClasses: [{name: q, soloLatencyMs: 1, sloMs: X}]"),
    ("batch.gangTimeoutSeconds", BASE + "batch: {gangTimeoutSeconds: X}"),
    ("batch.windowSeconds", BASE + "batch: {windowSeconds: X}"),
    ("batch.settleSeconds", BASE + "batch: {settleSeconds: X}"),
    ("batch.recordsSaveSeconds", BASE + "batch: {recordsSaveSeconds: X}"),
    ("solver.weights.fairness", BASE + "solver: {weights: {fairness: X}}"),
    ("solver.timeLimitSeconds", BASE + "solver: {timeLimitSeconds: X}"),
    ("solver.fairSharing.halfLifeSeconds", BASE + "solver: {fairSharing: {halfLifeSeconds: X}}"),
    ("solver.reservations.holdAheadSeconds",
     BASE + "solver: {reservations: {holdAheadSeconds: X}}"),
    ("solver.fairSharing.boost", BASE + "solver: {fairSharing: {boost: X}}"),
    ("solver.targetWorkload.halfLifeSeconds",
     BASE + "solver: {targetWorkload: {halfLifeSeconds: X}}"),
    ("solver.queueing.shortRunBonus", BASE + "solver: {queueing: {shortRunBonus: X}}"),
    ("solver.queueing.shortRunSeconds", BASE + "solver: {queueing: {shortRunSeconds: X}}"),
    ("solver.queueing.keepOrderAfterSeconds",
     BASE + "solver: {queueing: {keepOrderAfterSeconds: X}}"),
    ("sharing.fractionGrid[0]", BASE + "sharing: {fractionGrid: [X]}"),
    ("admission.maxPriority", BASE + "admission: {maxPriority: X}"),
    ("tenants[0].limits.maxGpusPerPod",
     "tenants: [{name: team-a, namespaces: [team-a], limits: {maxGpusPerPod: X}}]"),
    ("tenants[0].limits.maxGangSize",
     "tenants: [{name: team-a, namespaces: [team-a], limits: {maxGangSize: X}}]"),
    ("tenants[0].priority", "tenants: [{name: team-a, namespaces: [team-a], priority: X}]"),
]
FLOATS = {"tenants[0].quota.gpus", "tenants[0].borrowing.limitGpus", "tenants[0].weight",
          "gpuModels[0].activeWatts", "qosClasses[0].sloMs", "batch.gangTimeoutSeconds",
          "batch.windowSeconds", "batch.settleSeconds", "batch.recordsSaveSeconds",
          "solver.weights.fairness", "solver.timeLimitSeconds",
          "solver.queueing.shortRunBonus", "solver.queueing.shortRunSeconds",
          "solver.queueing.keepOrderAfterSeconds", "sharing.fractionGrid[0]"}


@pytest.mark.parametrize("value", [".inf", "-.inf", ".nan", "1e41", "1" + "0" * 30])
@pytest.mark.parametrize(("path", "template"), NUMBERS, ids=[n[0] for n in NUMBERS])
def test_every_number_is_finite_and_bounded(path: str, template: str, value: str) -> None:
    issues = _issues(template.replace("X", value))
    assert path in issues, issues
    message = issues[path]
    if path in FLOATS and value in (".inf", "-.inf", ".nan"):
        assert "finite" in message or "must be >" in message, message
    else:
        assert message.startswith("must be"), message


def test_a_refused_number_names_the_bound() -> None:
    issues = _issues("tenants: [{name: team-a, namespaces: [team-a], quota: {gpus: 1e41}}]\n")
    assert issues["tenants[0].quota.gpus"] == "must be <= 1000000, got '1e41'"
    issues = _issues("tenants: [{name: team-a, namespaces: [team-a], quota: {gpus: .inf}}]\n")
    assert issues["tenants[0].quota.gpus"] == "must be a finite number, got inf"


def test_priority_bound_defaults_and_holds_the_tenant_default() -> None:
    policy, _ = check_text(BASE)
    assert policy is not None and policy.admission.max_priority == 100
    assert policy.max_priority(policy.tenants[0]) == 100
    issues_by_path = _issues("""\
        tenants:
          - {name: team-a, namespaces: [team-a], priority: 200}
          - {name: team-b, namespaces: [team-b], priority: 20, limits: {maxPriority: 10}}
          - {name: team-c, namespaces: [team-c], priority: -20, limits: {maxPriority: 30}}
        """)
    assert list(issues_by_path) == ["tenants[0].priority", "tenants[1].priority"]
    assert "-100..100 (admission.maxPriority)" in issues_by_path["tenants[0].priority"]
    assert "-10..10 (tenants[1].limits.maxPriority)" in issues_by_path["tenants[1].priority"]
    policy, _ = check_text("admission: {maxPriority: 500}\n"
                           "tenants: [{name: a, namespaces: [a], priority: 400}]\n")
    assert policy is not None and policy.max_priority(policy.tenants[0]) == 500


def test_duplicate_keys_name_both_lines() -> None:
    policy, issues = check_text(textwrap.dedent("""\
        tenants:
          - name: team-a
            namespaces: [team-a]
            weight: 1
            weight: 2
        admission: {}
        """))
    assert policy is None
    (issue,) = issues
    assert (issue.path, issue.line) == ("tenants[0].weight", 5)
    assert "first at line 4" in issue.message and "again at line 5" in issue.message
    assert issue.render("p.yaml").startswith("p.yaml:5:5: tenants[0].weight: duplicate key")


BOMB = "\n".join(
    ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    + [f"{x}: &{x} [{','.join([f'*{p}'] * 9)}]" for p, x in zip("abcdefgh", "bcdefghi",
                                                                 strict=True)]
    + ["tenants: [{name: team-a, namespaces: [team-a]}]", ""])


def test_an_alias_bomb_is_refused_quickly() -> None:
    assert len(BOMB) < 1024
    start = time.perf_counter()
    policy, issues = check_text(BOMB)
    assert time.perf_counter() - start < 1.0
    assert policy is None
    assert "more than 100000 values once its aliases are expanded" in issues[0].message


def test_a_few_aliases_are_fine() -> None:
    policy, issues = check_text(textwrap.dedent("""\
        tenants:
          - {name: team-a, namespaces: [team-a], limits: &limits {maxGpusPerPod: 8}}
          - {name: team-b, namespaces: [team-b], limits: *limits}
        """))
    assert policy is not None, issues
    assert policy.tenants[1].limits.max_gpus_per_pod == 8


@pytest.mark.parametrize(("text", "needle"), [
    ("a: &a [*a]\n" + BASE, "recursive"),
    ("x: " + "[" * 5000 + "]" * 5000 + "\n" + BASE, "nested too deeply"),
    ("#" * (1024 * 1024 + 1), "more than the 1048576 a policy may have"),
])
def test_degenerate_documents_are_refused_with_a_reason(text: str, needle: str) -> None:
    start = time.perf_counter()
    policy, issues = check_text(text)
    assert time.perf_counter() - start < 2.0
    assert policy is None
    assert needle in issues[0].message, issues


def test_the_default_qos_class_is_one_the_tenant_may_use() -> None:
    issues = _issues("""\
        tenants:
          - {name: team-a, namespaces: [team-a], allowedQosClasses: [a], defaultQosClass: b}
        qosClasses: [{name: a}, {name: b}]
        """)
    assert "not among the tenant's allowedQosClasses (a)" in issues["tenants[0].defaultQosClass"]


def test_fair_sharing_reaches_the_solver_and_refuses_a_negative_half_life() -> None:
    fs = _solver_policy(BASE + "solver: {fairSharing: {halfLifeSeconds: 7200, "
                        "boost: 1.5}}\n").fair_sharing
    assert (fs.half_life_s, fs.boost, fs.enabled) == (7200.0, 1.5, True)
    assert "solver.fairSharing.halfLifeSeconds" in _issues(
        BASE + "solver: {fairSharing: {halfLifeSeconds: -60}}\n")
    assert "solver.fairSharing.halfLife" in _issues(
        BASE + "solver: {fairSharing: {halfLife: 60}}\n")


def test_the_reservation_hold_lead_reaches_the_solver() -> None:
    held = _solver_policy(BASE + "solver: {reservations: {holdAheadSeconds: 1800}}\n")
    assert held.reservations.hold_ahead_s == 1800.0
    assert _solver_policy(BASE).reservations.hold_ahead_s == 600.0


def test_keeping_reservations_is_off_unless_asked_and_takes_only_a_boolean() -> None:
    assert not _solver_policy(BASE).reservations.keep
    assert _solver_policy(BASE + "solver: {reservations: {keep: true}}\n").reservations.keep
    for bad in ("'maybe'", "2", "[true]", "{a: 1}"):
        issues = _issues(BASE + f"solver: {{reservations: {{keep: {bad}}}}}\n")
        assert "solver.reservations.keep" in issues, (bad, issues)


def test_the_queueing_settings_reach_the_solver_and_null_turns_keep_order_off() -> None:
    q = _solver_policy(BASE + "solver: {queueing: {shortRunBonus: 0.5, "
                       "shortRunSeconds: 600, keepOrderAfterSeconds: null}}\n").queueing
    assert (q.short_run_bonus, q.short_run_s, q.keep_order_after_s) == (0.5, 600.0, None)
    q = _solver_policy(BASE).queueing
    assert (q.short_run_bonus, q.short_run_s, q.keep_order_after_s) == (1.0, 3600.0, 30.0)
    issues = _issues(BASE + "solver: {queueing: {shortRunSeconds: 0.5}}\n")
    assert issues["solver.queueing.shortRunSeconds"].startswith("must be >= 1"), issues


def test_the_settle_is_off_or_at_least_a_tenth_of_a_second_and_reaches_the_controller() -> None:
    from admission.controller.settings import from_policy as settings_from_policy

    for bad in ("0.05", "-1", "1e-9"):
        issues = _issues(BASE + f"batch: {{settleSeconds: {bad}}}\n")
        assert any("settleSeconds" in p or "settleSeconds" in m for p, m in issues.items()), \
            issues
    for good, want in (("0", 0.0), ("0.1", 0.1), ("30", 30.0)):
        policy, issues = check_text(BASE + f"batch: {{settleSeconds: {good}}}\n")
        assert policy is not None, issues
        assert settings_from_policy(policy).settle_seconds == want
    policy, _ = check_text(BASE)
    assert policy is not None and settings_from_policy(policy).settle_seconds == 1.0
