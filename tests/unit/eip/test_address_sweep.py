"""The sweeper's EIP part on an in-memory EC2: what it frees, what it never touches, what it costs."""

from __future__ import annotations

from datetime import timedelta

import pytest

from nodecycle.domain.errors import TransientError
from nodecycle.domain.ports.addresses import AddressRefused
from nodecycle.domain.sweep.addresses import AddressSweep, AddressSweepReport
from nodecycle.domain.sweep.sweeper import SweepFailed
from tests.support.fakes import FakeClock, FakeMetrics
from tests.unit.eip.fakes import OWNER, T0, FakeAddresses
from tests.unit.sweeper.test_orphans import AMPLE

GRACE = timedelta(minutes=10)
LIVE = "i-0000000000000001a"
POOL = "ci"


@pytest.fixture
def ec2() -> FakeAddresses:
    fake = FakeAddresses(quota=10_000)
    fake.launch(LIVE)
    return fake


@pytest.fixture
def metrics() -> FakeMetrics:
    return FakeMetrics()


def sweep(ec2: FakeAddresses, metrics: FakeMetrics) -> AddressSweepReport:
    return AddressSweep(owner=OWNER, addresses=ec2, clock=FakeClock(T0), metrics=metrics, grace=GRACE)(AMPLE)


def test_an_unassociated_address_older_than_the_grace_is_released_and_a_younger_one_kept(
    ec2: FakeAddresses, metrics: FakeMetrics
) -> None:
    # Given an address left unassociated by a crash, one just allocated by a launch still at work, and one in use
    leaked = ec2.add(allocated_for="i-crashed", allocated_at=T0 - GRACE - timedelta(seconds=1))
    young = ec2.add(allocated_for="i-launching", allocated_at=T0 - timedelta(seconds=30))
    in_use = ec2.add(allocated_for=LIVE, allocated_at=T0 - timedelta(days=3), on=LIVE)

    # When the sweeper runs
    report = sweep(ec2, metrics)

    # Then only the leak is released
    assert leaked not in ec2.eips
    assert {young, in_use} <= set(ec2.eips)
    assert report == AddressSweepReport(released=1, returned=0, kept=2)
    assert metrics.counts["SweptEips"] == 1


def test_pool_addresses_are_never_released_and_are_taken_back_from_gone_instances(
    ec2: FakeAddresses, metrics: FakeMetrics
) -> None:
    # Given old free pool addresses, a pool address still associated with a terminated instance (EC2
    # normally ends that association itself), one on an instance DescribeInstances does not list (yet: a
    # new instance can be missing for a few seconds), and one on a live instance
    free = [ec2.add(pool=POOL, allocated_at=T0 - timedelta(days=30)), ec2.add(pool=POOL, allocated_at=None)]
    ec2.launch("i-terminated", state="terminated")
    stale = [ec2.add(pool=POOL, on="i-terminated")]
    unknown = ec2.add(pool=POOL, on="i-unlisted")
    live = ec2.add(pool=POOL, on=LIVE)

    # When the sweeper runs
    report = sweep(ec2, metrics)

    # Then every pool address is still allocated; the stale one is free again, the others untouched
    assert {*free, *stale, unknown, live} == set(ec2.eips)
    assert all(ec2.eips[address].association_id is None for address in stale)
    assert ec2.eips[unknown].instance_id == "i-unlisted"
    assert ec2.eips[live].instance_id == LIVE
    assert ec2.count("release") == 0
    assert report.returned == 1
    assert metrics.counts["SweptEips"] == 1


def test_an_old_address_still_associated_with_a_terminated_instance_is_disassociated_and_released(
    ec2: FakeAddresses, metrics: FakeMetrics
) -> None:
    ec2.launch("i-terminated", state="terminated")
    address = ec2.add(allocated_for="i-terminated", allocated_at=T0 - timedelta(hours=1), on="i-terminated")

    # The first sweep disassociates it; EC2 refuses its release until the disassociation settles
    first = sweep(ec2, metrics)
    assert (address in ec2.eips, ec2.eips[address].association_id, first.released) == (True, None, 0)
    # and the next sweep releases it
    assert sweep(ec2, metrics).released == 1
    assert address not in ec2.eips


def test_the_sweep_never_touches_the_addresses_of_another_owner(
    ec2: FakeAddresses, metrics: FakeMetrics
) -> None:
    # Given another stack's old unassociated address, and one on an instance that is gone
    theirs = [
        ec2.add(owner="stack-b", allocated_for="i-x", allocated_at=T0 - timedelta(days=1)),
        ec2.add(owner="stack-b", pool=POOL, on="i-vanished"),
    ]

    # When this stack's sweeper runs
    report = sweep(ec2, metrics)

    # Then both are as they were
    assert set(theirs) == set(ec2.eips)
    assert ec2.eips[theirs[1]].instance_id == "i-vanished"
    assert report == AddressSweepReport()
    assert metrics.counts["SweptEips"] == 0


def test_an_address_a_launch_associates_between_the_listing_and_the_release_is_kept(
    ec2: FakeAddresses, metrics: FakeMetrics
) -> None:
    # Given an old unassociated address that a redelivered launch associates just before the release
    address = ec2.add(allocated_for=LIVE, allocated_at=T0 - timedelta(hours=1))
    ec2.before["release"] = lambda allocation_id: ec2.take(allocation_id, LIVE)

    # When the sweeper runs, Then EC2's refusal (the address is in use) keeps it with the launch
    report = sweep(ec2, metrics)

    assert ec2.eips[address].instance_id == LIVE
    assert report.released == 0


def test_an_address_a_launch_associates_after_the_listing_is_kept_where_ec2_would_release_it_in_use(
    ec2: FakeAddresses, metrics: FakeMetrics
) -> None:
    # Given EC2 in a default VPC, where ReleaseAddress disassociates an address in use and releases it
    # without an error, and an old unassociated address that a launch associates once the sweep has listed it
    ec2.default_vpc = True
    address = ec2.add(allocated_for=LIVE, allocated_at=T0 - timedelta(hours=1))
    ec2.after["find"] = lambda *_: ec2.take(address, LIVE)

    # When the sweeper runs
    report = sweep(ec2, metrics)

    # Then the address stays with the launch: no refusal of EC2's to count on, the sweep looked again
    assert ec2.eips[address].instance_id == LIVE
    assert report == AddressSweepReport(released=0, returned=0, kept=1)
    assert metrics.counts["SweptEips"] == 0


def test_an_address_without_an_allocation_time_is_not_nodecycles_to_release(
    ec2: FakeAddresses, metrics: FakeMetrics
) -> None:
    address = ec2.add(allocated_for="i-x", allocated_at=None)

    report = sweep(ec2, metrics)

    assert address in ec2.eips
    assert report.kept == 1


def test_the_sweep_costs_one_listing_and_one_instance_lookup_however_many_addresses(
    ec2: FakeAddresses, metrics: FakeMetrics
) -> None:
    # Given 300 addresses on 300 live instances, and 300 leaked ones
    for number in range(300):
        instance = ec2.launch(f"i-{number:017x}")
        ec2.add(allocated_for=instance, on=instance)
        ec2.add(allocated_for=f"i-gone-{number}", allocated_at=T0 - timedelta(days=1))

    # When the sweeper runs
    report = sweep(ec2, metrics)

    # Then it listed once and asked for instance states once (the adapter batches that call by 200)
    assert ec2.count("find") == ec2.count("instance_states") == 1
    assert report.released == 300


def test_an_address_ec2_refuses_to_release_does_not_keep_the_others_from_being_released(
    ec2: FakeAddresses, metrics: FakeMetrics
) -> None:
    # Given four leaked addresses, the first of which EC2 refuses to release (a denial on its tags)
    old = T0 - GRACE - timedelta(seconds=1)
    stuck, *others = [ec2.add(allocated_for=f"i-crashed-{n}", allocated_at=old) for n in range(4)]

    def refuse(allocation_id: str) -> None:
        if allocation_id == stuck:
            ec2.faults["release"].append(AddressRefused("UnauthorizedOperation"))

    ec2.before["release"] = refuse

    # When the sweeper runs, Then the others are released, and the sweep fails once all were seen (its alarm)
    with pytest.raises(SweepFailed, match="refused to free 1 addresses"):
        sweep(ec2, metrics)
    assert set(ec2.eips) & {stuck, *others} == {stuck}
    assert metrics.counts["EipFailures"] == 1


def test_an_address_ec2_throttles_does_not_keep_the_others_from_being_released(
    ec2: FakeAddresses, metrics: FakeMetrics
) -> None:
    # Given four leaked addresses, and EC2 throttling the release of the first past botocore's own retries
    old = T0 - GRACE - timedelta(seconds=1)
    throttled, *others = [ec2.add(allocated_for=f"i-crashed-{n}", allocated_at=old) for n in range(4)]
    ec2.faults["release"].append(TransientError("RequestLimitExceeded"))

    # When the sweeper runs, Then the others are released, and the sweep fails once all were seen (its alarm)
    with pytest.raises(SweepFailed, match="1 addresses"):
        sweep(ec2, metrics)
    assert set(ec2.eips) & {throttled, *others} == {throttled}
    assert metrics.counts["EipFailures"] == 1


@pytest.mark.parametrize(
    "failure",
    [TransientError("RequestLimitExceeded"), AddressRefused("UnauthorizedOperation")],
    ids=["throttled", "denied"],
)
def test_an_instance_lookup_ec2_fails_does_not_keep_unassociated_leaks_from_being_released(
    ec2: FakeAddresses, metrics: FakeMetrics, failure: Exception
) -> None:
    # Given a leaked address, addresses on a live instance and on the interface of a gone one (whose
    # judgement needs the instances' states), and EC2 failing the one DescribeInstances of the sweep
    # (throttled past botocore's own retries: DescribeInstances is the account's busiest call; or denied)
    old = T0 - GRACE - timedelta(seconds=1)
    leaked = ec2.add(allocated_for="i-crashed", allocated_at=old)
    in_use = ec2.add(allocated_for=LIVE, allocated_at=old, on=LIVE)
    on_interface = ec2.add(allocated_for="i-0a1b2c3d4e5f60718", allocated_at=old)
    ec2.eips[on_interface].association_id = "eipassoc-eni"  # on an interface, no instance
    ec2.faults["instance_states"].append(failure)

    # When the sweeper runs, Then the leak, which needs no instance's state, is released; the associated
    # ones are left as they are (nothing says their instances are gone); and the sweep fails (its alarm)
    with pytest.raises(SweepFailed, match="did not tell the states of the addresses' instances") as failed:
        sweep(ec2, metrics)
    assert "refused" not in str(failed.value)  # no address was refused: the lookup failed
    assert leaked not in ec2.eips
    assert ec2.eips[in_use].instance_id == LIVE
    assert ec2.eips[on_interface].association_id == "eipassoc-eni"
    assert metrics.counts["SweptEips"] == 1
    assert metrics.counts["EipFailures"] == 1


@pytest.mark.parametrize("listed", [True, False], ids=["terminated", "no-longer-listed"])
def test_an_address_left_on_the_network_interface_of_a_gone_instance_is_freed(
    ec2: FakeAddresses, metrics: FakeMetrics, listed: bool
) -> None:
    # Given addresses of an instance gone days ago, left associated with its network interface, which
    # outlived it (DeleteOnTermination off): one allocated for it, one of a pool; and one on the interface of
    # a live instance (another tool's doing: in use)
    gone, live = "i-0a1b2c3d4e5f60718", "i-0a1b2c3d4e5f60719"
    if listed:
        ec2.launch(gone, "terminated")
    ec2.launch(live)
    days_ago = T0 - timedelta(days=2)
    allocated, pooled, in_use = (
        ec2.add(allocated_for=gone, allocated_at=days_ago),
        ec2.add(allocated_for=gone, allocated_at=days_ago, pool="ci"),
        ec2.add(allocated_for=live, allocated_at=days_ago),
    )
    for allocation_id in (allocated, pooled, in_use):
        ec2.eips[allocation_id].association_id = f"eipassoc-{allocation_id}"  # on eni-..., no instance

    # When the sweeper runs, and again (EC2 refuses a release until its disassociation has settled)
    first, second = sweep(ec2, metrics), sweep(ec2, metrics)

    # Then the allocated one is released, the pool's back in its pool, the live instance's left alone
    assert allocated not in ec2.eips
    assert ec2.eips[pooled].association_id is None
    assert ec2.eips[in_use].association_id is not None
    assert (first.returned, first.released + second.released) == (1, 1)


def test_an_address_on_an_interface_a_service_manages_is_left_to_it_and_fails_no_sweep(
    ec2: FakeAddresses, metrics: FakeMetrics
) -> None:
    # Given addresses of instances gone days ago on interfaces no instance holds: a pool address and one allocated
    # for its instance, each on a NAT gateway's interface (requester-managed: EC2 refuses their disassociation to
    # anyone but the gateway, AuthFailure)
    gone = "i-0a1b2c3d4e5f60718"
    ec2.launch(gone, "terminated")
    days_ago = T0 - timedelta(days=2)
    pooled = ec2.add(allocated_for=gone, allocated_at=days_ago, pool=POOL)
    allocated = ec2.add(allocated_for=gone, allocated_at=days_ago)
    for allocation_id in (pooled, allocated):
        ec2.eips[allocation_id].association_id = f"eipassoc-{allocation_id}"
        ec2.held_interfaces.add(f"eni-{allocation_id}")

    # When the sweeper runs, Then both stay where they are and nothing is asked of EC2 for them
    report = sweep(ec2, metrics)
    assert (report.released, report.returned, report.kept) == (0, 0, 2)
    assert ec2.eips[pooled].association_id is not None
    assert ec2.eips[allocated].association_id is not None
    assert "disassociate" not in ec2.calls
    assert "EipFailures" not in metrics.counts


def test_a_pool_address_on_an_interface_left_behind_is_returned_whatever_instance_grew_the_pool(
    ec2: FakeAddresses, metrics: FakeMetrics
) -> None:
    # Given a pool address allocated for an instance that lives (it grew the pool), left on an interface no
    # instance holds (its claimer went without its release step)
    pooled = ec2.add(allocated_for=LIVE, allocated_at=T0 - timedelta(days=2), pool=POOL)
    ec2.eips[pooled].association_id = "eipassoc-left"

    # When the sweeper runs, Then it is back in its pool
    assert sweep(ec2, metrics).returned == 1
    assert ec2.eips[pooled].association_id is None


@pytest.mark.parametrize(
    "failure",
    [TransientError("RequestLimitExceeded"), AddressRefused("UnauthorizedOperation")],
    ids=["throttled", "denied"],
)
def test_an_interface_lookup_ec2_fails_keeps_the_addresses_on_interfaces_and_fails_the_sweep(
    ec2: FakeAddresses, metrics: FakeMetrics, failure: Exception
) -> None:
    # Given a leaked address and a pool address on an interface no instance holds, and EC2 failing the sweep's
    # DescribeNetworkInterfaces
    old = T0 - GRACE - timedelta(seconds=1)
    leaked = ec2.add(allocated_for="i-crashed", allocated_at=old)
    pooled = ec2.add(allocated_for="i-crashed", allocated_at=old, pool=POOL)
    ec2.eips[pooled].association_id = "eipassoc-eni"
    ec2.faults["left_behind"].append(failure)

    # When the sweeper runs, Then the leak is released, the pool address kept (nothing says whose interface it is
    # on), and the sweep fails (its alarm)
    with pytest.raises(SweepFailed, match="did not tell the addresses' network interfaces"):
        sweep(ec2, metrics)
    assert leaked not in ec2.eips
    assert ec2.eips[pooled].association_id == "eipassoc-eni"
    assert metrics.counts["EipFailures"] == 1
