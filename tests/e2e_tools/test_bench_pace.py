"""e2e/bench_pace.py's figures that need no cluster: the 10 s timelines and the medians."""

from __future__ import annotations

from e2e import bench_pace as bp


def test_timelines_count_what_happened_by_each_ten_seconds() -> None:
    # a boundary counts in its own step; the list runs one step past the end
    assert bp._by_10s([0.5, 9.9, 10.0, 10.1, 25.0, 31.0], 33.0) == [3, 4, 5, 6]
    assert bp._by_10s([], 12.0) == [0, 0]
    assert bp._by_10s([3.0, 1.0, 2.0], 0.0) == [3]  # order does not matter


def test_medians_take_the_burst_measure_per_system() -> None:
    def row(system: str, create: float, burst: float) -> dict[str, object]:
        return {"system": system, "create_per_s": create, "running_p99_s": 1.0,
                "burst_running_p99_s": burst, "running_per_s": 50.0,
                "apiserver_cpu_s_create": 1.0, "webhook_mean_ms": "-"}

    rows = [row("none", 300.0, 150.0), row("berth-serve", 270.0, 170.0),
            row("none", 400.0, 160.0), row("berth-serve", 330.0, 180.0),
            row("berth-serve", 300.0, 190.0)]
    table = bp.medians(rows)
    col = table[0].split(" | ").index("median burst_running_p99_s")
    cells = {line.split(" | ")[0].strip("| "): line.split(" | ") for line in table[2:]}
    assert cells["none"][col] == "155.0"
    assert cells["berth-serve"][col] == "180.0"
    assert cells["berth-serve"][1] == "3"
    assert table[-1].endswith("| 0.86 |")  # 300 against the median of none's 350


METRICS = """\
# HELP scheduler_pending_pods [STABLE] Number of pending pods, by the queue type.
# TYPE scheduler_pending_pods gauge
scheduler_pending_pods{queue="active"} 12
scheduler_pending_pods{queue="gated"} 300
scheduler_schedule_attempts_total{profile="default-scheduler",result="scheduled"} 40
rest_client_requests_total{code="201",host="127.0.0.1:6443",method="POST"} 90
rest_client_requests_total{code="404",host="127.0.0.1:6443",method="PATCH"} 7
rest_client_requests_total{code="200",host="127.0.0.1:6443",method="PATCH"} 3
rest_client_rate_limiter_duration_seconds_sum{host="127.0.0.1:6443",verb="PATCH"} 20.5
rest_client_rate_limiter_duration_seconds_count{host="127.0.0.1:6443",verb="PATCH"} 10
rest_client_rate_limiter_duration_seconds_bucket{host="127.0.0.1:6443",verb="PATCH",le="1"} 4
process_cpu_seconds_total 3.5
apiserver_request_total{verb="POST"} 999
"""


def test_a_scheduler_scrape_keeps_its_queue_attempts_requests_and_limiter_waits() -> None:
    s = bp.scheduler_sample(METRICS)
    assert s["scheduler_pending_pods{active}"] == 12 and s["scheduler_pending_pods{gated}"] == 300
    assert s["scheduler_schedule_attempts_total{scheduled}"] == 40
    # requests by method and code: the stale patches of a clean-up answer 404
    assert s["rest_client_requests_total{PATCH 404}"] == 7
    assert s["rest_client_requests_total{PATCH 200}"] == 3
    assert s["rest_client_rate_limiter_duration_seconds_sum{PATCH}"] == 20.5
    assert s["process_cpu_seconds_total"] == 3.5
    assert not any(k.startswith(("apiserver_", "rest_client_rate_limiter_duration_seconds_bucket"))
                   for k in s)
    assert bp.scheduler_sample("garbage\n{}\n") == {}


def test_the_scheduler_table_reports_each_interval_s_increase_not_the_totals() -> None:
    def at(t: float, scheduled: float, patches: float, waited: float) -> dict[str, float]:
        return {"t": t, "scheduler_pending_pods{active}": 5.0,
                "scheduler_schedule_attempts_total{scheduled}": scheduled,
                "rest_client_requests_total{PATCH 404}": patches,
                "rest_client_rate_limiter_duration_seconds_sum{PATCH}": waited,
                "rest_client_rate_limiter_duration_seconds_count{PATCH}": patches,
                "process_cpu_seconds_total": scheduled / 100}

    samples = [at(0.0, 1000, 500, 100), *(at(float(t), 1000 + 50 * t, 500, 100)
                                           for t in range(1, 5)),
               at(5.0, 1250, 750, 100 + 250 * 20.0), at(6.0, 1300, 750, 5100)]
    rows = bp.scheduler_summary(samples)
    assert len(rows) == 2 + 2  # header, the interval ending at 5 s, the last sample
    first = [c.strip() for c in rows[2].strip("|").split("|")]
    assert first[0] == "5" and first[1] == "5"  # t, active
    assert first[5] == "250"  # scheduled within the interval, not since the start
    assert first[8] == "250" and first[9] == "20000"  # 250 patches, each 20 s in the limiter
    assert bp.scheduler_summary([])[2:] == []
