"""The controller's writes yield to a busy API server (pacing.py): how many are in flight
follows the answer times, between one and the configured most; nothing is dropped or
reordered by it."""

from __future__ import annotations

import threading
import time

import pytest

from admission import constants as c
from admission.controller.api import ApiError, ClusterApi
from admission.controller.pacing import (
    BUCKET_S,
    BURST_FLOOR,
    BURST_PODS,
    BURST_WINDOW_S,
    FEED_PODS,
    FEED_RATE,
    WINDOW_S,
    Arrivals,
    PacedApi,
    WritePace,
)
from admission.controller.settings import (
    scheduler_feed,
    scheduler_feed_rate,
    write_pacing,
    write_pacing_floor,
)
from solver.api import solve
from tests.admission.controller.fakeapi import FakeApi
from tests.admission.controller.harness import controller, gang_cluster, gates
from tests.admission.controller.harness import settings as controller_settings
from tests.admission.controller.objects import FakeClock


class Clock:  # seconds, for WritePace (the controller's FakeClock is a datetime)
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def write(pace: WritePace, clock: Clock, rtt: float) -> None:
    with pace.slot():
        clock.now += rtt


def creating(pace: WritePace, pods: int = BURST_PODS) -> None:
    """``pods`` pods created at once, as the controller's pod watch reports them."""
    for _ in range(pods):
        pace.arrivals.seen()


def in_a_burst(clock: Clock) -> WritePace:
    """A pace that may go down to a quarter, its base 10 ms, while pods are being created."""
    pace = WritePace(8, floor=0.25, clock=clock)
    pace.observe(0.010)
    creating(pace)
    return pace


def test_starts_at_one_and_grows_to_most_while_answers_stay_fast() -> None:
    clock = Clock()
    pace = WritePace(8, clock=clock)
    assert pace.limit == 1
    for _ in range(40):
        write(pace, clock, 0.005)
    assert pace.limit == 8 and pace.halvings == 0


def test_halves_once_per_round_trip_when_answers_slow_down_then_recovers() -> None:
    clock = Clock()
    pace = WritePace(8, clock=clock)
    for _ in range(40):
        write(pace, clock, 0.005)
    assert pace.base == pytest.approx(0.005)
    write(pace, clock, 0.100)  # 20x the base: the server queues someone's work
    assert pace.limit == 4
    clock.now -= 0.050  # a second slow answer within the same round trip: no second cut
    write(pace, clock, 0.030)
    assert pace.limit == 4 and pace.halvings == 1
    for _ in range(5):
        write(pace, clock, 0.100)
    assert pace.limit == 1  # never below one write at a time
    for _ in range(40):
        write(pace, clock, 0.006)
    assert pace.limit == 8


def test_answers_within_factor_and_slack_of_the_base_are_not_congestion() -> None:
    clock = Clock()
    pace = WritePace(4, clock=clock)
    write(pace, clock, 0.010)
    for _ in range(30):
        write(pace, clock, 0.024)  # under 2 x 10 ms + 5 ms
    assert pace.limit == 4 and pace.halvings == 0


def test_the_lease_renewals_give_the_base_before_any_pod_write() -> None:
    """A burst's first releases are judged against the idle server the Lease saw."""
    clock = Clock()
    pace = WritePace(8, clock=clock)
    for _ in range(20):
        pace.observe(0.004)
    for _ in range(20):
        write(pace, clock, 0.060)
    assert pace.limit == 1 and pace.halvings == 0  # it never grew: every answer was slow
    assert pace.base == pytest.approx(0.004)


def test_the_base_is_forgotten_after_the_window() -> None:
    clock = Clock()
    pace = WritePace(8, clock=clock)
    pace.observe(0.002)
    clock.now += WINDOW_S + BUCKET_S
    write(pace, clock, 0.050)
    assert pace.base == pytest.approx(0.050)


@pytest.mark.parametrize("status, cut", [(429, True), (503, True), (504, True), (409, False),
                                         (404, False), (422, False)])
def test_the_server_asking_to_slow_down_cuts_the_limit_and_the_error_still_raises(
        status: int, cut: bool) -> None:
    clock = Clock()
    pace = WritePace(8, clock=clock)
    for _ in range(40):
        write(pace, clock, 0.005)
    with pytest.raises(ApiError), pace.slot():
        clock.now += 0.005
        raise ApiError(status, "x")
    assert (pace.limit == 4) is cut
    assert pace.in_flight == 0


def test_fixed_when_pacing_is_off() -> None:
    clock = Clock()
    pace = WritePace(8, adaptive=False, clock=clock)
    for rtt in (0.005, 1.0, 0.005, 2.0):
        write(pace, clock, rtt)
    assert pace.limit == 8


def test_below_one_the_next_write_really_waits() -> None:
    pace = WritePace(8, floor=0.25)
    creating(pace)
    pace.observe(0.001)
    with pace.slot():
        time.sleep(0.05)  # slow: a cut to 0.5 and a pause of one round trip
    assert pace.limit == 0.5
    start = time.monotonic()
    with pace.slot():
        waited = time.monotonic() - start
    assert waited >= 0.04


def test_threads_never_exceed_the_limit_and_every_write_is_made() -> None:
    """Real threads against a server that slows down with every write in flight: the peak
    concurrency follows the limit, and the limit settles low."""
    pace = WritePace(8)
    lock = threading.Lock()
    state = {"now": 0, "peak": 0, "done": 0, "over": 0}

    def one() -> None:
        with pace.slot():
            with lock:
                state["now"] += 1
                state["peak"] = max(state["peak"], state["now"])
                if state["now"] > int(pace.limit):
                    state["over"] += 1
                busy = state["now"]
            time.sleep(0.002 * busy * busy)  # a server that queues: slower per write in flight
            with lock:
                state["now"] -= 1
                state["done"] += 1

    for _ in range(20):
        pace.observe(0.002)
    threads = [threading.Thread(target=one) for _ in range(200)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert state["done"] == 200 and state["over"] == 0
    assert pace.halvings > 0 and pace.limit < 8


def test_paced_api_holds_pod_writes_and_events_and_times_the_lease() -> None:
    api = FakeApi()
    clock = Clock()
    pace = WritePace(2, clock=clock)
    paced = PacedApi(api, pace)  # type: ignore[arg-type]
    api.add_pod({"metadata": {"name": "p", "namespace": "team-a", "uid": "u1"},
                 "spec": {"containers": []}})
    paced.patch_pod("team-a", "p", [{"op": "add", "path": "/metadata/labels",
                                     "value": {"a": "b"}}])
    paced.create_event("team-a", {"reason": "X"})
    assert api.get_pod("team-a", "p")["metadata"]["labels"] == {"a": "b"}  # type: ignore[index]
    assert paced.get_pod("team-a", "p") is not None  # everything else passes through
    assert pace.base is not None and pace.in_flight == 0


class _Recorder:
    """Any call answers ``(name, args, kwargs)``: what reached the API behind the pace."""

    def __getattr__(self, name: str) -> object:
        return lambda *args, **kwargs: (name, args, kwargs)


#: Every ClusterApi call PacedApi passes straight through, with distinct arguments, so that
#: one forwarded in the wrong order (several are all strings) shows.
_THROUGH = {
    "list_pods": (), "watch_pods": ("rv-1", 7), "get_pod": ("ns", "pod"),
    "list_nodes": (), "watch_nodes": ("rv-2", 8), "list_jobs": (), "watch_jobs": ("rv-3", 9),
    "list_dra": ("resourceclaims",), "watch_dra": ("deviceclasses", "rv-4", 10),
    "get_lease": ("ns", "lease"), "create_lease": ("ns", {"l": 1}),
    "get_config_map": ("ns", "cm"), "create_config_map": ("ns", {"c": 1}),
    "replace_config_map": ("ns", "cm", {"c": 2}),
    "apply_custom": ("g", "v1", "things", "ns", {"b": 1}),
    "list_custom": ("g", "v1", "things", "ns"),
}


def test_paced_api_passes_every_other_call_through_unchanged_and_unpaced() -> None:
    clock = Clock()
    pace = WritePace(2, clock=clock)
    paced = PacedApi(_Recorder(), pace)  # type: ignore[arg-type]
    protocol = {n for n in vars(ClusterApi) if not n.startswith("_")}
    paced_writes = {"patch_pod", "set_pod_condition", "evict_pod", "create_event",
                    "replace_lease"}
    assert protocol == set(_THROUGH) | paced_writes  # a new ClusterApi call needs a row here
    for name, args in _THROUGH.items():
        assert name in vars(PacedApi), f"{name} is not spelled out on PacedApi"
        assert getattr(paced, name)(*args) == (name, args, {})
    assert pace.base is None and pace.in_flight == 0  # none of them went through the pace


def test_below_one_a_pause_follows_each_write_and_one_good_answer_lifts_it() -> None:
    clock = Clock()
    pace = in_a_burst(clock)
    write(pace, clock, 0.100)
    assert pace.limit == 0.5
    assert pace._next_start == pytest.approx(clock.now + 0.100)  # in flight half the time
    clock.now = pace._next_start
    write(pace, clock, 0.100)
    assert pace.limit == 0.25
    # the next write waits three round trips (in flight a quarter of the time)
    assert pace._next_start == pytest.approx(clock.now + 0.300)
    clock.now = pace._next_start
    write(pace, clock, 0.010)
    assert pace.limit == 0.5
    clock.now = pace._next_start
    write(pace, clock, 0.010)
    assert pace.limit == 1 and pace._next_start <= clock.now


def test_the_controller_sends_every_release_write_through_its_pace() -> None:
    """Wired in: a cycle's releases are timed by the controller's limit and never exceed it."""
    api = gang_cluster([(3, 2), (1, 1), (2, 1)], nodes=2)
    ctl = controller(api, FakeClock(), s=controller_settings(release_writers=8),
                     solve_fn=lambda snap: solve(snap, solver="bestfit"))
    assert ctl.pace.adaptive and ctl.pace.most == 8 and ctl.pace.base is None
    ctl.run_cycle()
    assert all(c.SCHEDULING_GATE not in gates(api, k) for k in api.pods)
    assert ctl.pace.base is not None and ctl.pace.in_flight == 0


@pytest.mark.parametrize("env, pacing, floor", [
    ({}, True, BURST_FLOOR), ({"BERTH_WRITE_PACING": "off"}, False, BURST_FLOOR),
    ({"BERTH_WRITE_PACING": " OFF "}, False, BURST_FLOOR),
    ({"BERTH_WRITE_PACING": "on"}, True, BURST_FLOOR),
    ({"BERTH_WRITE_PACING_FLOOR": "1"}, True, 1.0),
    ({"BERTH_WRITE_PACING_FLOOR": "0.125"}, True, 0.125),
    ({"BERTH_WRITE_PACING_FLOOR": "a quarter"}, True, BURST_FLOOR),
    ({"BERTH_WRITE_PACING_FLOOR": "nan"}, True, BURST_FLOOR),
    ({"BERTH_WRITE_PACING_FLOOR": "-1"}, True, BURST_FLOOR),
    ({"BERTH_WRITE_PACING_FLOOR": "0"}, True, BURST_FLOOR)])
def test_the_environment_switches(monkeypatch: pytest.MonkeyPatch, env: dict[str, str],
                                  pacing: bool, floor: float) -> None:
    monkeypatch.delenv("BERTH_WRITE_PACING", raising=False)
    monkeypatch.delenv("BERTH_WRITE_PACING_FLOOR", raising=False)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    assert write_pacing() is pacing and write_pacing_floor() == floor


@pytest.mark.parametrize("raw, feed", [(None, FEED_PODS), ("0", 0), ("250", 250),
                                       (" 7 ", 7), ("-5", FEED_PODS), ("lots", FEED_PODS),
                                       ("1e3", FEED_PODS)])
def test_the_scheduler_feed_from_the_environment(monkeypatch: pytest.MonkeyPatch,
                                                 raw: str | None, feed: int) -> None:
    monkeypatch.delenv("BERTH_SCHEDULER_FEED", raising=False)
    if raw is not None:
        monkeypatch.setenv("BERTH_SCHEDULER_FEED", raw)
    assert scheduler_feed() == feed


@pytest.mark.parametrize("raw, rate", [(None, FEED_RATE), ("0", 0.0), ("50", 50.0),
                                       (" 12.5 ", 12.5), ("-5", FEED_RATE), ("fast", FEED_RATE),
                                       ("nan", FEED_RATE), ("inf", FEED_RATE),
                                       ("1e9", FEED_RATE)])
def test_the_scheduler_feed_rate_from_the_environment(monkeypatch: pytest.MonkeyPatch,
                                                      raw: str | None, rate: float) -> None:
    monkeypatch.delenv("BERTH_SCHEDULER_FEED_RATE", raising=False)
    if raw is not None:
        monkeypatch.setenv("BERTH_SCHEDULER_FEED_RATE", raw)
    assert scheduler_feed_rate() == rate


def test_while_the_scheduler_is_short_the_writes_keep_its_pace() -> None:
    """With a feed rate, a scheduler short of released pods gets that many writes a second: as
    many in flight as the recent answer time needs (50 a second at 100 ms: 5), at most
    ``most``, whatever the limit; with enough released pods, the limit alone again."""
    clock = Clock()
    short = [True]
    pace = WritePace(8, floor=0.25, clock=clock, scheduler_short=lambda: short[0],
                     feed_rate=50)
    pace.observe(0.010)
    creating(pace)
    assert pace.allowed() == 1  # no answer time yet: one write
    for _ in range(20):
        write(pace, clock, 0.100)
    assert pace.limit == 1 and pace.allowed() == 5
    for _ in range(40):
        write(pace, clock, 0.400)  # 20 would be needed; never more than most
    assert pace.allowed() == 8
    short[0] = False
    assert pace.allowed() == max(1, int(pace.limit)) < 8
    short[0] = True
    off = WritePace(8, floor=0.25, clock=clock, scheduler_short=lambda: True, feed_rate=0)
    off.observe(0.010)
    for _ in range(20):
        write(off, clock, 0.100)
    assert off.allowed() == 1  # no feed rate (the default): one write in flight
    assert WritePace(8).feed_rate == FEED_RATE == 0
    fixed = WritePace(3, adaptive=False, clock=clock, scheduler_short=lambda: True, feed_rate=50)
    write(fixed, clock, 1.0)
    assert fixed.allowed() == 3  # pacing off: the configured writers, no more


def test_the_feed_s_writes_really_overlap() -> None:
    """With the scheduler short and slow answers, the writes made by threads overlap up to
    what the feed allows, never more."""
    pace = WritePace(8, scheduler_short=lambda: True, feed_rate=50)
    pace.rtt = 0.06  # recent answers of 60 ms: 3 in flight for 50 a second
    pace._answered = lambda rtt, busy: None  # type: ignore[method-assign]  # keep it so
    peak = 0
    lock = threading.Lock()
    now = [0]

    def one() -> None:
        nonlocal peak
        with pace.slot():
            with lock:
                now[0] += 1
                peak = max(peak, now[0])
            time.sleep(0.05)
            with lock:
                now[0] -= 1

    threads = [threading.Thread(target=one) for _ in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert peak == 3


def test_every_cut_is_told_to_the_controller_s_counter() -> None:
    from admission.controller.metrics import Metrics

    metrics = Metrics()
    clock = Clock()
    pace = WritePace(8, clock=clock, on_cut=metrics.write_limit_cuts.inc)
    for _ in range(40):
        write(pace, clock, 0.005)
    for _ in range(3):
        write(pace, clock, 0.100)  # slow, each a round trip after the last cut
    assert pace.halvings == 3
    assert metrics.registry.get_sample_value("berth_api_write_limit_cuts_total") == 3


def test_a_burst_is_enough_new_pods_within_the_window_and_ends_when_they_stop() -> None:
    clock = Clock()
    arrivals = Arrivals(clock)
    for _ in range(BURST_PODS - 1):
        arrivals.seen()
        clock.now += 0.01
    assert not arrivals.burst()
    arrivals.seen()
    assert arrivals.burst()
    clock.now += BURST_WINDOW_S
    assert not arrivals.burst()  # the oldest of the last BURST_PODS is too old now
    slow = Arrivals(clock)  # pods created steadily but slowly never make a burst
    for _ in range(10 * BURST_PODS):
        slow.seen()
        clock.now += 2 * BURST_WINDOW_S / BURST_PODS
        assert not slow.burst()


def test_outside_a_burst_the_limit_never_falls_below_one_write() -> None:
    """A server slow for long (not a creation burst) still gets writes one after another,
    without pauses, however low the floor."""
    clock = Clock()
    pace = WritePace(8, floor=1 / 64, clock=clock)
    pace.observe(0.001)
    for _ in range(20):
        before = clock.now
        write(pace, clock, 0.100)
        assert pace.limit == 1 and pace._next_start <= clock.now
        assert clock.now - before == pytest.approx(0.100)  # no pause before the write


def test_when_the_burst_ends_the_pause_is_dropped_and_the_limit_is_one_again() -> None:
    clock = Clock()
    pace = in_a_burst(clock)
    write(pace, clock, 0.100)
    clock.now = pace._next_start  # (a fake clock: the pause is waited for by hand)
    write(pace, clock, 0.100)
    assert pace.limit == 0.25 and pace._next_start > clock.now
    clock.now += BURST_WINDOW_S  # no pod created since: the burst is over
    start = clock.now
    write(pace, clock, 0.100)  # still slow, yet not paused, and the limit is one write
    assert clock.now - start == pytest.approx(0.100)
    assert pace.limit == 1


def test_the_controller_counts_created_pods_from_its_watch_and_nothing_else() -> None:
    api = gang_cluster([(1, 1)], nodes=1)
    ctl = controller(api, FakeClock(), s=controller_settings(release_writers=8),
                     solve_fn=lambda snap: solve(snap, solver="bestfit"))
    pod = next(iter(api.pods.values()))
    for event in ("MODIFIED", "DELETED") * BURST_PODS:
        ctl.on_pod_event(event, pod)
    assert not ctl.pace.arrivals.burst()
    for i in range(BURST_PODS):
        ctl.on_pod_event("ADDED", {**pod, "metadata": {**pod["metadata"], "name": f"n{i}",
                                                       "uid": f"u{i}"}})
    assert ctl.pace.arrivals.burst()


def test_a_burst_does_not_pause_the_writes_while_the_scheduler_is_short_of_pods() -> None:
    """The pause yields the API server to the creates, never the scheduler's work: while too
    few released pods wait to be bound, the writes go on one in flight or more, and the
    pause comes back once the scheduler has enough."""
    clock = Clock()
    short = [True]
    pace = WritePace(8, floor=0.25, clock=clock, scheduler_short=lambda: short[0])
    pace.observe(0.010)
    creating(pace)
    for _ in range(5):
        start = clock.now
        write(pace, clock, 0.100)  # slow answers in a burst, yet no pause and one in flight
        assert clock.now - start == pytest.approx(0.100)
        assert pace.limit == 1
    short[0] = False
    write(pace, clock, 0.100)
    assert pace.limit == 0.5 and pace._next_start > clock.now  # the pause is back


def test_the_controller_s_scheduler_is_short_below_feed_pods_released_and_unbound() -> None:
    api = gang_cluster([(1, 1)], nodes=1)
    ctl = controller(api, FakeClock(), s=controller_settings(release_writers=8),
                     solve_fn=lambda snap: solve(snap, solver="bestfit"))
    pod = next(iter(api.pods.values()))
    assert ctl.pace.scheduler_short()

    def released(i: int, node: str | None = None) -> dict[str, object]:
        meta = {**pod["metadata"], "name": f"r{i}", "uid": f"r{i}",
                "resourceVersion": "9" if node else "5",
                "annotations": {c.ANNOTATION_ASSIGNED_NODE: "node-0"}}
        spec = {**pod["spec"], "schedulingGates": []}
        if node:
            spec["nodeName"] = node
        return {**pod, "metadata": meta, "spec": spec}

    for i in range(FEED_PODS):
        ctl.on_pod_event("ADDED", released(i))
    assert not ctl.pace.scheduler_short()
    assert ctl.metrics.registry.get_sample_value("berth_released_unbound_pods") == FEED_PODS
    ctl.on_pod_event("MODIFIED", released(0, node="node-0"))
    assert ctl.pace.scheduler_short()  # one bound: 99 left to bind
    ctl.on_pod_event("DELETED", released(1))
    assert ctl.inventory.released_unbound() == FEED_PODS - 2
