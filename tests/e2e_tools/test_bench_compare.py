"""The head-to-head harness's own logic (e2e/bench_compare.py), without a cluster: how a
scenario becomes the gangs every system receives, each system's vocabulary, the policy Berth
serves, and how watch events become waits, gang starts and partly bound gangs."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest
import yaml

from admission import constants as c
from admission.policy import load_policy, to_solver
from e2e import bench_compare as bc
from solver.simulate.generate import generate


def test_a_scenario_becomes_whole_gpu_gangs_with_times_divided() -> None:
    sc = generate(seed=0)
    wl = bc.from_scenario("default", sc, compress=30, note="n")
    assert len(wl.gangs) == len(sc.arrivals)
    for a, g in zip(sc.arrivals, wl.gangs, strict=True):
        pod = a.gang.pods[0]
        assert g.pods == len(a.gang.pods) and g.gpus == max(1, pod.gpu_count)
        assert g.arrival_s == pytest.approx(a.arrival_s / 30, abs=1e-3)
        assert g.duration_s == pytest.approx(max(2.0, a.duration_s / 30), abs=1e-3)
        assert len(g.name) <= 63 and g.name == bc.dns_name(g.name)
    assert sum(wl.quotas().values()) <= wl.capacity_gpus
    q = wl.quotas()
    assert q["team-a"] >= 2 * q["team-b"] - 1  # weight 2 against 1


def test_dns_names_are_valid_and_distinct() -> None:
    names = ["Team_A/Train 1", "team-a-train-1", "x" * 80, "x" * 80 + "y"]
    out = [bc.dns_name(n) for n in names]
    assert len(set(out)) == len(out)
    for n in out:
        assert len(n) <= 63 and n[0].isalnum() and n[-1].isalnum()
        assert set(n) <= set("abcdefghijklmnopqrstuvwxyz0123456789-")


def _gang(**kw: object) -> bc.ReplayGang:
    base = dict(name="g", tenant="team-a", pods=2, gpus=4, cpu_milli=1000, memory_mib=1024,
                models=("A100", "H100"), arrival_s=1.0, duration_s=10.5)
    base.update(kw)
    return bc.ReplayGang(**base)  # type: ignore[arg-type]


def _args(*, ignore_disruptions: bool = False) -> argparse.Namespace:
    return argparse.Namespace(deadline_factor=1.5, ignore_disruptions=ignore_disruptions)


def test_every_system_gets_the_same_pods_in_its_own_vocabulary() -> None:
    g = _gang()
    plain = bc.job_manifest(g, deadline_factor=1.5)
    spec = plain["spec"]["template"]["spec"]
    assert plain["spec"]["parallelism"] == plain["spec"]["completions"] == 2
    assert spec["containers"][0]["resources"]["limits"] == {"nvidia.com/gpu": "4"}
    assert spec["activeDeadlineSeconds"] == 16  # ceil(10.5 x 1.5)
    expr = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"][0]["matchExpressions"][0]
    assert expr["values"] == ["A100", "H100"]
    ann = plain["spec"]["template"]["metadata"]["annotations"]
    assert ann[bc.KWOK_DELAY] == "10500ms" and ann["pod-ready.stage.kwok.x-k8s.io/delay"] == "0ms"

    k = bc.job_manifest(g, deadline_factor=1.5, labels={c.KUEUE_QUEUE_LABEL: bc.QUEUE})
    assert k["metadata"]["labels"][c.KUEUE_QUEUE_LABEL] == bc.QUEUE
    berth = bc.Berth.__new__(bc.Berth)
    berth.args = _args()
    b = berth.job(g)["spec"]["template"]["metadata"]["annotations"]
    assert b[c.ANNOTATION_GANG_SIZE] == "2" and b[c.ANNOTATION_GPU_MODELS] == "A100,H100"
    v = bc.job_manifest(g, deadline_factor=1.5, scheduler="volcano",
                        pod_annotations={c.VOLCANO_GROUP_ANNOTATION: g.name})
    assert v["spec"]["template"]["spec"]["schedulerName"] == "volcano"
    assert not any("podFailurePolicy" in j["spec"] for j in (plain, k, v, berth.job(g)))


@pytest.mark.parametrize("system", ["kube-scheduler", "kueue", "berth", "berth-kueue"])
def test_ignore_disruptions_gives_every_system_s_jobs_the_rule(system: str) -> None:
    sys_ = bc.SYSTEM_CLASSES[system].__new__(bc.SYSTEM_CLASSES[system])
    sys_.args = _args(ignore_disruptions=True)
    job = sys_.job(_gang())
    assert job["spec"]["podFailurePolicy"] == {"rules": [{
        "action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]}]}
    assert job["spec"]["backoffLimit"] == 6  # failures of any other kind still count


@pytest.mark.parametrize("backend", ["standalone", "kueue"])
def test_the_policy_berth_serves_is_valid_and_scaled(tmp_path: Path, backend: str) -> None:
    wl = bc.default_workload(0, 30)
    ns = {t: f"ns-{t}" for t in wl.weights}
    doc = bc.berth_policy(wl, ns, backend=backend, compress=30)
    path = tmp_path / "policy.yaml"
    path.write_text(yaml.safe_dump(doc))
    policy, tenants = to_solver(load_policy(path))
    assert {t.name: t.quota_milli for t in tenants} == {
        t: q * 1000 for t, q in wl.quotas().items()}
    assert all(t.can_borrow and t.borrow_limit_milli is None for t in tenants)
    assert policy.reservations.after_s == pytest.approx(300 / 30)
    assert policy.weights.aging_per_hour == pytest.approx(0.5 * 30)
    # the short-run bonus and the keep-order wait are times of the workload: compressed too
    assert policy.queueing.short_run_s == pytest.approx(3600 / 30)
    assert policy.queueing.keep_order_after_s == pytest.approx(30 / 30)
    # standalone Berth reclaims lent quota as Kueue's ClusterQueues and Volcano's reclaim do;
    # in front of Kueue, Kueue reclaims
    assert policy.reclaim.enabled == (backend == "standalone")
    assert policy.reclaim.min_run_s == pytest.approx(300 / 30)


def test_quotas_split_by_weight_sum_to_the_whole() -> None:
    assert bc.split_by_weight(46, {"a": 2, "b": 1, "c": 1}) == {"a": 23, "b": 12, "c": 11}
    assert bc.split_by_weight(2, {"a": 2, "b": 1, "c": 1}) == {"a": 1, "b": 1, "c": 0}
    assert bc.split_by_weight(0, {"a": 1, "b": 1}) == {"a": 0, "b": 0}
    for total in range(60):
        assert sum(bc.split_by_weight(total, {"a": 3, "b": 2.5, "c": 1}).values()) == total


def test_kueue_gets_one_flavor_per_gpu_model_with_all_its_gpus() -> None:
    wl = bc.default_workload(0, 30)
    flavors = bc.kueue_flavors(wl)
    models = {n.gpus[0].model for n in wl.nodes}
    assert sorted(m for _, m, _ in flavors) == sorted(models)
    assert sum(len(n.gpus) for _, _, nodes in flavors for n in nodes) == wl.capacity_gpus
    assert all(n.gpus[0].model == m for _, m, nodes in flavors for n in nodes)
    mem = [nodes[0].gpus[0].memory_mib for _, _, nodes in flavors]
    assert mem == sorted(mem)  # the smallest GPUs first: any-model pods try them first
    # each tenant's GPUs over all flavors are its quota, as Berth is given
    per_tenant = {t: 0 for t in wl.weights}
    for _, _, nodes in flavors:
        for t, q in bc.split_by_weight(sum(len(n.gpus) for n in nodes), wl.weights).items():
            per_tenant[t] += q
    assert per_tenant == wl.quotas()


def _seen(gang: str, **kw: float | bool | None) -> bc.PodSeen:
    return bc.PodSeen(gang=f"team-a/{gang}", **kw)  # type: ignore[arg-type]


def test_a_gang_starts_when_all_its_pods_run_together() -> None:
    wl = bc.Workload("w", generate(seed=0).nodes, {"team-a": 1.0},
                     (_gang(name="whole"), _gang(name="apart"), _gang(name="half")),
                     note="", compress=1)
    ns = {"team-a": "team-a"}
    created = {"team-a/whole": 1.0, "team-a/apart": 1.0, "team-a/half": 1.0}
    seen = {
        "a": _seen("whole", bound=2.0, running=3.0), "b": _seen("whole", bound=2.5, running=4.0),
        # one pod ran and ended before the other started: never together
        "c": _seen("apart", bound=2.0, running=2.0, ended=5.0, succeeded=True),
        "d": _seen("apart", bound=6.0, running=6.0),
        "e": _seen("half", bound=2.0, running=2.0),  # its second pod never bound
    }
    r = {x.key.split("/")[1]: x for x in bc.gang_results(wl, ns, created, seen, end=30.0)}
    assert r["whole"].start_s == 4.0 and r["whole"].partial_s == pytest.approx(0.5)
    assert r["apart"].start_s is None and r["apart"].ran_apart and r["apart"].settled
    assert r["half"].start_s is None and not r["half"].settled
    assert r["half"].partial_s == pytest.approx(28.0)
    spans = bc.spans_of(wl, ns, created, seen)
    assert len(spans) == 6  # every pod of every gang, the unstarted one waiting
    assert sum(1 for s in spans if s.start_s is None) == 1


def test_a_model_without_known_memory_is_left_out_of_the_policy(tmp_path: Path) -> None:
    """The openb node list gives no GPU memory; the policy Berth serves must still load."""
    from solver.types import GPU, Node

    nodes = tuple(Node(name=f"n{i}", cpu_milli=64000, memory_mib=256000,
                       gpus=tuple(GPU(g, "G2", 0) for g in range(8))) for i in range(2))
    wl = bc.Workload("openb", nodes, {"team-a": 1.0, "team-b": 1.0}, (_gang(),), note="",
                     compress=40)
    doc = bc.berth_policy(wl, {"team-a": "a", "team-b": "b"}, backend="standalone",
                          compress=40)
    assert doc["gpuModels"] == []
    path = tmp_path / "policy.yaml"
    path.write_text(yaml.safe_dump(doc))
    load_policy(path)


def test_kueue_one_flavor_is_every_gpu_node_unlabelled() -> None:
    wl = bc.default_workload(0, 30)
    [(flavor, model, nodes)] = bc.kueue_flavors(wl, one_flavor=True)
    assert (flavor, model) == ("gpu", None)
    assert sum(len(n.gpus) for n in nodes) == wl.capacity_gpus


def test_disruptions_count_pods_that_ran_and_ended_without_succeeding() -> None:
    seen = {
        "a/0": bc.PodSeen("a/g", running=1.0, ended=5.0, deleted=True),
        "a/1": bc.PodSeen("a/g", running=1.0, ended=5.0),
        "a/2": bc.PodSeen("a/g", running=6.0, ended=9.0, succeeded=True),
        "a/3": bc.PodSeen("a/h", running=2.0, ended=3.0),
        "a/4": bc.PodSeen("a/h", ended=3.0, deleted=True),  # gone before it ran: none lost
        "a/5": bc.PodSeen("a/k", running=2.0),  # still running
        "a/6": bc.PodSeen("a/k", running=2.0, ended=8.0, succeeded=True, deleted=True),
    }
    assert bc.disruptions(seen) == {"pods_disrupted": 3, "gangs_disrupted": 2,
                                    "most_pods_disrupted_in_a_gang": 2}
    assert bc.disruptions({}) == {"pods_disrupted": 0, "gangs_disrupted": 0,
                                  "most_pods_disrupted_in_a_gang": 0}


def test_a_lost_gang_s_job_has_given_up_only_once_it_finished() -> None:
    from kubernetes import client

    def job(*conds: tuple[str, str]) -> client.V1Job:
        return client.V1Job(status=client.V1JobStatus(
            active=0, failed=3, conditions=[client.V1JobCondition(type=t, status=v)
                                            for t, v in conds]))

    backing_off = job()  # no condition: it makes the pod again after its back-off
    assert not bc._job_gave_up(backing_off)
    assert not bc._job_gave_up(job(("Failed", "False")))
    assert bc._job_gave_up(job(("Failed", "True")))
    assert bc._job_gave_up(job(("Complete", "True")))
    assert bc._job_state(backing_off) == "active=0 succeeded=0 failed=3"
    assert bc._job_state(None) == "Job gone"
    assert bc._job_state(job(("Failed", "True"))).startswith("active=0 succeeded=0 failed=3; "
                                                             "Failed=True")


def test_a_gated_pods_workload_says_its_conditions() -> None:
    workloads = [
        {"metadata": {"name": "pod-other", "ownerReferences": [{"uid": "u-other"}]},
         "status": {"conditions": [{"type": "Admitted", "status": "False", "reason": "X"}]}},
        {"metadata": {"name": "pod-low", "ownerReferences": [{"uid": "u-low"}]},
         "status": {"conditions": [
             {"type": "QuotaReserved", "status": "False", "reason": "Pending",
              "message": "Preempted to accommodate a workload"},
             {"type": "Requeued", "status": "False", "reason": "Preempted", "message": "m"},
             {"type": "Evicted", "status": "True", "reason": "Preempted"}]}},
    ]
    says = bc.kueue_workload_says(workloads, "u-low")
    assert says == [
        "Workload pod-low: QuotaReserved=False: Pending: Preempted to accommodate a workload",
        "Workload pod-low: Requeued=False: Preempted: m"]
    assert bc.kueue_workload_says(workloads, "u-none") == []
    assert bc.kueue_workload_says([{"metadata": {"name": "w"}}], "u-low") == []


def test_medians_over_runs_take_each_systems_rows_of_the_workload() -> None:
    def row(system: str, p99: float, alloc: float, worst: float, never: int = 0,
            workload: str = "default", to_end: float | None = None) -> dict[str, object]:
        out = {"system": system, "workload": workload, "wait_s": {"p99": p99},
               "wait_mean_s": p99 / 10, "gpu_allocated": alloc, "worst_fair_ratio": worst,
               "never_started": never, "pods_lost": 0}
        if to_end is not None:  # rows saved before it was kept have none
            out["wait_p99_to_end_s"] = to_end
        return out

    runs = [[row("berth", 150, 0.83, 0.94, to_end=150),
             row("volcano", 210, 0.63, 0.53, never=1, to_end=300),
             row("berth", 10, 0.99, 0.99, workload="openb")],
            [row("berth", 170, 0.84, 0.92, to_end=170), row("volcano", 183, 0.72, 0.73),
             {"system": "simulated berth", "workload": "default"}],
            [row("berth", 160, 0.80, 0.96)]]
    lines = bc.medians_table(runs, "default")
    berth = next(line for line in lines if line.startswith("| berth |"))
    volcano = next(line for line in lines if line.startswith("| volcano |"))
    assert berth == ("| berth | 3 | 160 (150-170) | 160 (150-170) [2 of 3 runs] | 16 (15-17) "
                     "| 83.0 (80.0-84.0) | 0.94 (0.92-0.96) | 0 | 0 |")
    # two runs: the median is their mean; never-started gangs add up over the runs
    assert volcano.startswith("| volcano | 2 | 196 (183-210) | 300 (300-300) [1 of 2 runs] |")
    assert volcano.endswith("| 1 | 0 |")
    assert len(lines) == 4  # heading, rule, two systems; the simulated row is not a run
    assert bc.medians_table(runs, "nowhere") == []


def test_medians_need_saved_runs() -> None:
    with pytest.raises(SystemExit):
        bc.main(["--medians-from", "x.json"])


def test_a_saved_run_may_give_only_some_systems(tmp_path: Path) -> None:
    import json
    path = tmp_path / "run.json"
    figures = dict.fromkeys(bc.ROW_FIGURES, 1)
    path.write_text(json.dumps([{"system": s, "workload": "default", **figures}
                                for s in ("berth", "kueue", "berth-kueue")]))
    assert [r["system"] for r in bc.saved_run(str(path))] == ["berth", "kueue", "berth-kueue"]
    assert [r["system"] for r in bc.saved_run(f"{path}:berth,kueue")] == ["berth", "kueue"]


@pytest.mark.parametrize(("text", "says"), [
    (None, "cannot read"),
    ("{not json", "is not JSON"),
    ('{"system": "berth"}', "is not a list of rows"),
    ('[{"system": "berth"}]', "is not a list of rows"),
    ('[1, 2]', "is not a list of rows"),
    ('[{"system": 3, "workload": "default"}]', "is not a list of rows"),
    ('[{"system": "berth", "workload": "default"}]', "is not a list of rows"),
    ('[{"system": "berth", "workload": "default", "started": 1, "never_started": 0, '
     '"gpu_allocated": null, "worst_fair_ratio": 1, "jain": 1}]', "is not a list of rows"),
    ('[{"system": "berth", "workload": "default", "started": true, "never_started": 0, '
     '"gpu_allocated": 1, "worst_fair_ratio": 1, "jain": 1}]', "is not a list of rows"),
])
def test_a_file_that_is_not_a_saved_run_says_so(tmp_path: Path, text: str | None,
                                                  says: str) -> None:
    path = tmp_path / "run.json"
    if text is not None:
        path.write_text(text)
    for argv in (["--report-from", str(path)],
                 ["--report-from", str(path), "--medians-from", str(path)]):
        with pytest.raises(SystemExit) as got:
            bc.main(argv)
        message = str(got.value.code)
        assert message.startswith("--report-from: ") and says in message and str(path) in message
    with pytest.raises(SystemExit) as got:
        bc.saved_run(f"{path}:berth")
    assert str(got.value.code).startswith("--medians-from: ") and says in str(got.value.code)


def test_simulate_only_predicts_without_a_cluster_against_a_saved_run(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``--simulate-only`` runs the simulator under the policy the berth system serves, needs
    no control plane, and compares with the saved berth row of ``--report-from``."""
    saved = tmp_path / "run.json"
    saved.write_text(json.dumps([{
        "system": "berth", "workload": "default", "started": 8, "never_started": 0,
        "gpu_allocated": 0.5, "worst_fair_ratio": 0.9, "jain": 0.99,
        "wait_s": {"p50": 1.0, "p90": 2.0, "p99": 3.0}}]))
    assert bc.main(["--simulate-only", "--workloads", "default", "--max-gangs", "8",
                    "--report-from", str(saved)]) == 0
    out = capsys.readouterr().out
    row = json.loads(next(line for line in out.splitlines() if line.startswith("{")))
    assert row["system"] == "simulated berth" and row["started"] == 8
    assert "Simulator against the real run (Berth): p50 wait" in out
    assert "against 1 s real" in out


def test_the_watcher_times_each_gate_and_a_gang_waits_on_its_last_pod() -> None:
    """Kueue's admission and Berth's release are told apart: each gate is timed from the
    watch events, and a gang is through a gate once as many pods as it has are."""
    w = bc.Watcher(core=None, t0=0.0)  # type: ignore[arg-type]

    def pod(name: str, *gates: str) -> dict[str, object]:
        return {"metadata": {"name": name, "labels": {bc.GANG_LABEL: "g"}},
                "spec": {"schedulingGates": [{"name": x} for x in gates]}, "status": {}}

    kueue, berth = "kueue.x-k8s.io/admission", c.SCHEDULING_GATE
    w._see("ns", pod("p0", kueue, berth), 1.0, deleted=False)
    w._see("ns", pod("p1", kueue, berth), 1.0, deleted=False)
    w._see("ns", pod("p0", berth), 4.0, deleted=False)
    w._see("ns", pod("p1", berth), 6.0, deleted=False)
    w._see("ns", pod("p0"), 9.0, deleted=False)
    w._see("ns", pod("p0"), 12.0, deleted=False)  # seen again: its time stays
    assert w.pods["ns/p0"].ungated == {kueue: 4.0, berth: 9.0}
    assert w.pods["ns/p1"].ungated == {kueue: 6.0}
    wl = bc.Workload("w", generate(seed=0).nodes, {"team-a": 1.0}, (_gang(name="g"),),
                     note="", compress=1)
    waits = bc.gate_waits(wl, {"team-a": "ns"}, {"ns/g": 1.0}, w.pods)
    # through Kueue when its second pod was (6 s, 5 s after arrival); Berth's gate still holds p1
    assert waits == {"g": {kueue: 5.0}}
    w._see("ns", pod("p1"), 11.0, deleted=False)
    assert bc.gate_waits(wl, {"team-a": "ns"}, {"ns/g": 1.0}, w.pods) == {
        "g": {kueue: 5.0, berth: 10.0}}


def test_a_gang_that_never_started_counts_as_waiting_until_the_end() -> None:
    """Over started gangs alone, leaving the longest-waiting gang unstarted would shorten the
    p99; counted until the run's end it lengthens it."""
    def result(arrival: float, start: float | None) -> bc.GangResult:
        return bc.GangResult("ns/g", "team-a", 1, 1, arrival, start, 0.0)

    started = [result(0.0, float(i)) for i in range(98)]
    assert bc.p99_to_end(started, end=500.0) == pytest.approx(bc.percentiles(
        [float(i) for i in range(98)])["p99"]) and bc.p99_to_end(started, end=500.0) < 97
    # two gangs arrived at 100 s never started: 400 s each at least, the two longest waits
    with_unstarted = [*started, result(100.0, None), result(100.0, None)]
    assert bc.p99_to_end(with_unstarted, end=500.0) == pytest.approx(400.0)
    assert bc.p99_to_end([], end=1.0) is None
