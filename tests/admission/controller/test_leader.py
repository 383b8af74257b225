"""Lease election with fake clocks: one leader, takeover after expiry, step-down in time, and
no takeover of a renewed Lease however far the replicas' wall clocks disagree."""

from __future__ import annotations

from datetime import timedelta

from admission.controller.leader import LeaseElector
from tests.admission.controller.fakeapi import FakeApi
from tests.admission.controller.objects import T0, FakeClock


class Replica:
    """One replica's two clocks: a wall clock (offset from true time by ``skew`` seconds) and
    a monotonic clock (its own origin, the same rate), both driven by :meth:`Time.advance`."""

    def __init__(self, time: Time, skew: float, origin: float) -> None:
        self.wall = FakeClock(T0 + timedelta(seconds=skew))
        self.origin = origin
        self.time = time
        time.replicas.append(self)

    def monotonic(self) -> float:
        return self.origin + self.time.elapsed


class Time:
    def __init__(self) -> None:
        self.elapsed = 0.0
        self.replicas: list[Replica] = []

    def advance(self, seconds: float) -> None:
        self.elapsed += seconds
        for r in self.replicas:
            r.wall.advance(seconds)


def elector(api: FakeApi, time: Time, who: str, *, skew: float = 0.0,
            origin: float = 1000.0) -> LeaseElector:
    r = Replica(time, skew, origin)
    return LeaseElector(api=api, namespace="berth-system", name="berth-controller",
                        identity=who, clock=r.wall, monotonic=r.monotonic, lease_seconds=15,
                        renew_deadline_seconds=10)


def test_one_leader_then_takeover_after_expiry() -> None:
    api, time = FakeApi(), Time()
    a, b = elector(api, time, "a"), elector(api, time, "b")
    assert a.try_acquire_or_renew() and a.is_leader
    assert not b.try_acquire_or_renew() and not b.is_leader
    time.advance(5)
    assert a.try_acquire_or_renew() and not b.try_acquire_or_renew()
    # a stops renewing (partitioned): it steps down at the renew deadline, before b may take
    # over at the lease's expiry, so two leaders never overlap.
    time.advance(10.5)
    assert not a.is_leader
    assert not b.try_acquire_or_renew()
    time.advance(5)
    assert b.try_acquire_or_renew() and b.is_leader
    lease = api.leases["berth-system/berth-controller"]["spec"]
    assert lease["holderIdentity"] == "b" and lease["leaseTransitions"] == 1
    assert not a.try_acquire_or_renew()


def test_a_clock_ten_minutes_ahead_never_steals_a_renewed_lease() -> None:
    api, time = FakeApi(), Time()
    a = elector(api, time, "a")
    ahead = elector(api, time, "ahead", skew=600, origin=5.0)
    assert a.try_acquire_or_renew()
    # Read by ahead's wall clock, a's renewTime is ten minutes old at every look; it is being
    # renewed all the same, and that is all that counts.
    for _ in range(60):
        time.advance(2)
        assert a.try_acquire_or_renew() and a.is_leader
        assert not ahead.try_acquire_or_renew() and not ahead.is_leader
    assert api.leases["berth-system/berth-controller"]["spec"]["holderIdentity"] == "a"


def test_a_clock_behind_takes_a_silent_lease_after_the_lease_duration() -> None:
    api, time = FakeApi(), Time()
    a = elector(api, time, "a", skew=600)
    behind = elector(api, time, "behind", skew=-600)
    assert a.try_acquire_or_renew()
    # Read by behind's wall clock, a's renewTime lies twenty minutes in the future: it must
    # not wait for that, only for leaseDuration of seeing the record unchanged.
    time.advance(1)
    assert not behind.try_acquire_or_renew()  # first sight of this record: t = 1
    time.advance(14.5)
    assert not behind.try_acquire_or_renew()  # 14.5 s of silence seen
    time.advance(1)
    assert behind.try_acquire_or_renew() and behind.is_leader  # 15.5 s
    assert not a.try_acquire_or_renew() and not a.is_leader


def test_observation_restarts_with_every_renewal() -> None:
    api, time = FakeApi(), Time()
    a, b = elector(api, time, "a"), elector(api, time, "b")
    assert a.try_acquire_or_renew()
    assert not b.try_acquire_or_renew()
    time.advance(14)
    assert a.try_acquire_or_renew()  # renewed just before b's 15 s would be up
    time.advance(2)
    assert not b.try_acquire_or_renew()  # 16 s since b first looked, 2 s since the renewal
    time.advance(13.5)
    assert not b.try_acquire_or_renew()  # b saw the renewal at 16: silent 13.5 s so far
    time.advance(2)
    assert b.try_acquire_or_renew()


def test_release_on_shutdown_hands_over_at_once() -> None:
    api, time = FakeApi(), Time()
    a, b = elector(api, time, "a"), elector(api, time, "b", skew=-600)
    a.try_acquire_or_renew()
    assert not b.try_acquire_or_renew()
    a.release()
    assert not a.is_leader
    assert "holderIdentity" not in api.leases["berth-system/berth-controller"]["spec"]
    time.advance(0.1)
    assert b.try_acquire_or_renew()
    assert api.leases["berth-system/berth-controller"]["spec"]["leaseTransitions"] == 1


def test_racing_writers_cannot_both_win() -> None:
    api, time = FakeApi(), Time()
    a, b = elector(api, time, "a"), elector(api, time, "b")
    a.try_acquire_or_renew()
    b.try_acquire_or_renew()  # b starts watching the record
    time.advance(20)  # expired for everyone
    stale = api.get_lease("berth-system", "berth-controller")
    assert b.try_acquire_or_renew()
    # a writes with the version it read before b's write: refused.
    original_get = api.get_lease
    api.get_lease = lambda ns, name: stale  # type: ignore[method-assign]
    assert not a.try_acquire_or_renew()
    api.get_lease = original_get  # type: ignore[method-assign]
    assert api.leases["berth-system/berth-controller"]["spec"]["holderIdentity"] == "b"


def test_a_renew_time_given_as_a_datetime_is_read() -> None:
    # The kubernetes client hands a Lease's MicroTime back as a datetime, not a string.
    from admission.controller.translate import parse_time

    api, time = FakeApi(), Time()
    a, b = elector(api, time, "a"), elector(api, time, "b")
    a.try_acquire_or_renew()
    spec = api.leases["berth-system/berth-controller"]["spec"]
    spec["renewTime"] = parse_time(spec["renewTime"])
    assert not b.try_acquire_or_renew()
    time.advance(20)
    assert b.try_acquire_or_renew()


def test_the_leader_steps_down_on_its_monotonic_clock_whatever_its_wall_clock_does() -> None:
    api, time = FakeApi(), Time()
    a = elector(api, time, "a")
    assert a.try_acquire_or_renew()
    a.clock.now -= timedelta(hours=1)  # type: ignore[attr-defined]  # NTP steps the clock back
    time.advance(10.5)
    assert not a.is_leader
