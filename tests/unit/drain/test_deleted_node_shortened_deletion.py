"""The drain of a node object deleted under a running instance, and a pod bound to its name whose deletion someone else
shortens while the drain waits for it: kube-apiserver counts the shortened deletion's deadline from the first delete
(rest.BeforeDelete: the old deadline less the old grace, plus the new one), while the pod's kubelet kills it with the
shorter grace from when it sees it. The drain's wait for such a pod runs that grace from the poll that first saw it."""

from __future__ import annotations

from datetime import timedelta

from nodecycle.domain.model import Step
from tests.support.fakes import T0
from tests.unit.drain.builders import pod
from tests.unit.drain.test_drain_steps import FakeCluster, draining, evict


def test_a_deleted_nodes_pod_whose_deletion_is_shortened_again_is_waited_out_for_the_new_grace_from_the_poll_that_saw_it() -> (
    None
):
    # Given a drain whose node object is gone, the one pod left bound to its name being deleted by someone else since
    # T0 with a grace of 60 s, seen by a poll before its deadline
    cluster = FakeCluster(
        nodes={}, pods=[pod("web-1", deletion_at=T0 + timedelta(seconds=60), deletion_grace=60)]
    )
    step = evict(cluster)
    first = step(draining(extra={"polls": 1}), T0 + timedelta(seconds=5))
    assert (first.then, first.again) == (None, True), first
    record = draining(**first.changes)

    # When someone else shortens that deletion to 20 s at T0 + 50 (the API server moves its deadline to T0 + 20, in
    # the past; the kubelet stops the pod by T0 + 70), and the drain polls at T0 + 52, then past the first deadline
    cluster.pods = [pod("web-1", deletion_at=T0 + timedelta(seconds=20), deletion_grace=20)]
    second = step(record, T0 + timedelta(seconds=52))
    assert (second.then, second.again) == (None, True), second
    record = draining(**second.changes)
    third = step(record, T0 + timedelta(seconds=61))

    # Then it still waits: the new grace runs from the poll that first saw it (T0 + 52), until T0 + 72
    assert (third.then, third.again) == (None, True), third
    record = draining(**third.changes)
    settled = step(record, T0 + timedelta(seconds=73))
    assert (settled.then, settled.changes.get("outcome")) == (Step.COMPLETE, "node-gone"), settled
