"""``berth dev-cluster up --with-berth`` without a cluster: the policy it writes, the queues it
would create, its records and CLI checks. The cluster itself is exercised by
e2e/tests/test_quickstart.py (docs/quickstart.md run as written)."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest
import yaml

from admission.cli import main
from admission.devcluster import berth, binaries, processes
from admission.devcluster.nodes import gpu_fleet
from admission.devcluster.rbac import RBAC_FILE, rbac_files
from admission.policy import check_text, load_policy


@pytest.mark.parametrize("backend", berth.BACKENDS)
def test_dev_policy_is_the_sample_with_the_backend_and_the_fake_gpu(backend: str) -> None:
    doc = berth.dev_policy(backend, gpu_product="NVIDIA-H100-80GB-HBM3", gpu_memory_mib=81559)
    policy, issues = check_text(yaml.safe_dump(doc))
    assert policy is not None, [i.render() for i in issues]
    assert policy.release.backend == backend
    sample = load_policy(berth.SAMPLE_POLICY)
    assert [t.name for t in policy.tenants] == [t.name for t in sample.tenants]
    assert [t.quota.gpus for t in policy.tenants] == [t.quota.gpus for t in sample.tenants]
    for tenant in policy.tenants:  # team-b allowed only A100s: now the fake H100s too
        assert not tenant.allowed_models or "NVIDIA-H100-80GB-HBM3" in tenant.allowed_models
    assert len(policy.gpu_models) == len(sample.gpu_models)  # H100 was already known


def test_dev_policy_adds_an_unknown_gpu_model() -> None:
    doc = berth.dev_policy("standalone", gpu_product="NVIDIA-L4", gpu_memory_mib=23034)
    policy, issues = check_text(yaml.safe_dump(doc))
    assert policy is not None, [i.render() for i in issues]
    assert {m.name: m.memory_mib for m in policy.gpu_models}["NVIDIA-L4"] == 23034
    with pytest.raises(ValueError, match="backend must be one of"):
        berth.dev_policy("slurm", gpu_product="x", gpu_memory_mib=1)


def test_written_policy_loads_and_says_where_it_came_from(tmp_path: Path) -> None:
    doc = berth.dev_policy("kueue", gpu_product="NVIDIA-H100-80GB-HBM3", gpu_memory_mib=81559)
    out = berth.write_policy(doc, tmp_path / "p" / "policy.yaml", note="from the sample\nline 2")
    assert out.read_text().startswith("# from the sample\n# line 2\n")
    assert load_policy(out).release.backend == "kueue"


def test_fake_nodes_advertise_the_policys_time_slicing_slots() -> None:
    assert berth.shared_slots() == load_policy(berth.SAMPLE_POLICY).sharing.time_slicing.replicas


def test_kueue_queues_hold_berths_ceiling_per_tenant() -> None:
    doc = berth.dev_policy("kueue", gpu_product="NVIDIA-H100-80GB-HBM3", gpu_memory_mib=81559)
    policy, _ = check_text(yaml.safe_dump(doc))
    queues = {q.cluster_queue: q for q in berth._kueue_queues(policy, gpu_fleet())}  # 32 GPUs
    a, b = queues["team-a"], queues["team-b"]
    assert (a.local, a.namespaces, a.gpus, a.shared) == ("team-a-queue", ("team-a",), 24, 96)
    assert (b.local, b.namespaces, b.gpus, b.shared) == ("team-b-queue", ("team-b",), 8, 32)
    small = berth._kueue_queues(policy, gpu_fleet(racks_per_block=1, nodes_per_rack=1))
    assert [q.gpus for q in small] == [8, 8]  # never more than the fleet has


def test_info_round_trips(tmp_path: Path) -> None:
    assert berth.BerthInfo.load(tmp_path) is None
    (tmp_path / "berth").mkdir()
    info = berth.BerthInfo(backend="volcano", policy="/p.yaml", port=1234, ca="/ca.crt",
                           namespace="berth-system", tenants={"team-a": ["team-a"]},
                           queues={"team-a": "team-a"})
    info.save(tmp_path)
    assert berth.BerthInfo.load(tmp_path) == info
    assert info.url == "https://127.0.0.1:1234"
    assert not info.serving()  # nothing listens there


def test_rbac_files_add_a_components_own_rbac() -> None:
    assert rbac_files() == (RBAC_FILE,)
    # Kueue builds its Workloads itself; Berth only lists them (admission/controller/queued.py)
    kueue = rbac_files(["kueue"])
    assert len(kueue) == 2 and kueue[1].parts[-3:] == ("components", "kueue", "rbac.yaml")
    assert "verbs: [\"list\"]" in kueue[1].read_text()
    volcano = rbac_files(["volcano"])
    assert len(volcano) == 2 and volcano[1].parts[-3:] == ("components", "volcano", "rbac.yaml")


def test_next_steps_name_files_that_exist() -> None:
    for backend in berth.BACKENDS:
        text = berth.next_steps(backend)
        for word in text.split():
            if word.startswith("config/examples/"):
                assert (binaries.REPO_ROOT / word).is_file(), word
    assert "kueue-job.yaml" in berth.next_steps("kueue")
    assert "volcano-job.yaml" in berth.next_steps("volcano")


def test_spawned_record_names_the_program_a_wrapper_execs(tmp_path: Path) -> None:
    sleep = Path("/bin/sleep").resolve()
    spawn = processes.spawner(tmp_path / "logs")
    proc, record = spawn("wrapped", ["sh", "-c", f"exec {sleep} 30"], exe=str(sleep))
    try:
        assert record.exe == str(sleep) and Path(record.log).parent == tmp_path / "logs"
        deadline = time.monotonic() + 5
        while not processes.is_running(record) and time.monotonic() < deadline:
            time.sleep(0.05)  # running sh until it execs sleep
        assert processes.is_running(record)
    finally:
        processes.stop(record, proc, grace=1)
    assert not processes.group_alive(record.pgid)


def test_backend_needs_with_berth(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert main(["dev-cluster", "--dir", str(tmp_path), "up", "--backend", "kueue"]) == 2
    assert "--backend kueue needs --with-berth" in capsys.readouterr().err


def test_missing_backend_binary_is_named_before_anything_starts(
        capsys: pytest.CaptureFixture[str], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BERTH_E2E_CACHE", str(tmp_path / "empty-cache"))
    workdir = tmp_path / "c"
    assert main(["dev-cluster", "--dir", str(workdir), "up", "--with-berth",
                 "--backend", "volcano"]) == 2
    assert "e2e/build.sh volcano" in capsys.readouterr().err
    assert not workdir.exists()


def test_berth_cli_is_this_interpreter() -> None:
    assert berth.BERTH_CLI[0] == sys.executable


def test_what_up_with_berth_spawns_is_recorded_and_loads_again(tmp_path: Path) -> None:
    from admission.devcluster.cluster import DevCluster

    cluster = DevCluster(workdir=tmp_path, die_with_parent=True)
    cluster.log_dir.mkdir()
    sleep = str(Path("/bin/sleep").resolve())
    procs = [cluster.spawn(name, [sleep, "30"])
             for name in (berth.PROCESS_NAME, "kueue", "vc-scheduler")]
    try:
        again = DevCluster.load(tmp_path)  # what `down` and `status` read
        assert [r.name for r in again.records] == [berth.PROCESS_NAME, "kueue", "vc-scheduler"]
        assert all(again.running().values())
        with pytest.raises(ValueError, match="not a component"):
            cluster.spawn("miner", [sleep, "30"])
    finally:
        cluster.stop()
    assert not any(processes.group_alive(rec.pgid) for _, rec in procs)
