"""Lease election with a fake clock: one leader, takeover after expiry, step-down in time."""

from __future__ import annotations

from admission.controller.leader import LeaseElector
from tests.admission.controller.fakeapi import FakeApi
from tests.admission.controller.objects import FakeClock


def elector(api: FakeApi, clock: FakeClock, who: str) -> LeaseElector:
    return LeaseElector(api=api, namespace="berth-system", name="berth-controller",
                        identity=who, clock=clock, lease_seconds=15, renew_deadline_seconds=10)


def test_one_leader_then_takeover_after_expiry() -> None:
    api, clock = FakeApi(), FakeClock()
    a, b = elector(api, clock, "a"), elector(api, clock, "b")
    assert a.try_acquire_or_renew() and a.is_leader
    assert not b.try_acquire_or_renew() and not b.is_leader
    clock.advance(5)
    assert a.try_acquire_or_renew() and not b.try_acquire_or_renew()
    # a stops renewing (partitioned): it steps down at the renew deadline, before b may take
    # over at the lease's expiry, so two leaders never overlap.
    clock.advance(10.5)
    assert not a.is_leader
    assert not b.try_acquire_or_renew()
    clock.advance(5)
    assert b.try_acquire_or_renew() and b.is_leader
    lease = api.leases["berth-system/berth-controller"]["spec"]
    assert lease["holderIdentity"] == "b" and lease["leaseTransitions"] == 1
    assert not a.try_acquire_or_renew()


def test_release_on_shutdown_hands_over_at_once() -> None:
    api, clock = FakeApi(), FakeClock()
    a, b = elector(api, clock, "a"), elector(api, clock, "b")
    a.try_acquire_or_renew()
    a.release()
    assert not a.is_leader
    clock.advance(0.1)
    assert b.try_acquire_or_renew()


def test_racing_writers_cannot_both_win() -> None:
    api, clock = FakeApi(), FakeClock()
    a, b = elector(api, clock, "a"), elector(api, clock, "b")
    a.try_acquire_or_renew()
    clock.advance(20)  # expired for everyone
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

    api, clock = FakeApi(), FakeClock()
    a, b = elector(api, clock, "a"), elector(api, clock, "b")
    a.try_acquire_or_renew()
    spec = api.leases["berth-system/berth-controller"]["spec"]
    spec["renewTime"] = parse_time(spec["renewTime"])
    assert not b.try_acquire_or_renew()
    clock.advance(20)
    assert b.try_acquire_or_renew()
