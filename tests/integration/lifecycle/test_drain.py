"""Drains end to end on the sandbox: PodDisruptionBudgets hold, completion waits for the last pod,
DaemonSet pods stay, the timeout policy applies, duplicates are harmless, the pods of a deleted node are evicted,
a missing node with none completes at once, another owner's node is left alone."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from kubernetes.client import AppsV1Api, PolicyV1Api

from nodecycle.adapters.clock import SystemClock
from nodecycle.adapters.kube.budget import ConfigMapBudgetStore, KubeNodeInventory
from nodecycle.domain.budget import BudgetLimits, DisruptionBudget, SlotRequest
from nodecycle.domain.model import ENDED_BY, ENDS_ITS_INSTANCE, Step, Transition, record_id
from nodecycle.domain.policy import Quantity
from nodecycle.domain.ports.cluster import OWNER_ANNOTATION, ZONE_LABEL
from nodecycle_sandbox import Sandbox
from nodecycle_sandbox.aws.group import HookSpec
from nodecycle_sandbox.aws.records import TERMINATING
from nodecycle_sandbox.checks import completed_before_drained, last_pod_gone, pdb_breaches
from nodecycle_sandbox.kube.admission import Denial
from tests.integration.lifecycle.harness import (
    core_api,
    find_record,
    held_by_a_budget,
    node_of,
    record_of,
    records,
    running,
    terminate_action,
    wait_finished,
    wait_for,
    wait_steady,
    wait_terminated,
)
from tests.support.fakes import FakeMetrics

pytestmark = pytest.mark.slow

# The drain timeout five tests wait out (a budget that never lets go, another owner's node, a dead kubelet's pods,
# an eviction a webhook keeps refusing, a forced delete refused). A drain nothing holds up takes 1-2 s here (1.6 s
# on two cores at load 20, 2.5 s at load 30): 8 s is three to five times that. (12 s before: 20 s more.)
DRAIN_TIMEOUT = 8


@pytest.fixture(scope="module")
def sandbox() -> Iterator[Sandbox]:
    parameters = {
        "DrainTimeoutSeconds": str(DRAIN_TIMEOUT),
        "ForceGraceSeconds": "1",
        "TimeoutPolicy": "force",
    }
    with running(parameters=parameters, size=6) as sandbox:
        yield sandbox


def in_service(sandbox: Sandbox) -> list[str]:
    return sorted(sandbox.asg.in_state("InService"))


def test_a_terminating_node_drains_under_its_budgets_and_completes_after_its_last_pod(
    sandbox: Sandbox,
) -> None:
    # Given a node running web and api pods (under PodDisruptionBudgets) and a DaemonSet pod
    victim = in_service(sandbox)[0]
    node = node_of(sandbox, victim)
    sandbox.kube.reset_history()
    pods_before = [p for p in sandbox.kube.objects("pods") if p["spec"].get("nodeName") == node]
    assert any(p["metadata"]["namespace"] == "shop" for p in pods_before)

    # When its instance terminates (and is replaced)
    sandbox.asg.terminate(victim)
    action = wait_terminated(sandbox, victim)

    # Then the action was completed by nodecycle, only after the last workload pod had gone
    history = sandbox.kube.history()
    assert (action.outcome, action.result) == ("completed", "CONTINUE")
    assert completed_before_drained(history, [action]) == []
    assert action.finished_at is not None
    gone = last_pod_gone([e for e in history if e.time <= action.finished_at], node)
    assert gone is not None
    assert gone <= action.finished_at
    # no PodDisruptionBudget ever had fewer healthy pods than it requires
    assert pdb_breaches(history) == []
    # DaemonSet pods were never evicted
    evicted = {e.name for e in history if e.resource == "pods/eviction"}
    assert evicted
    assert not any(name.startswith("node-agent") for name in evicted)
    record = wait_finished(sandbox, victim)
    assert record.outcome == "drained"
    assert record.pods_evicted == len(evicted)


def test_a_drain_stuck_on_a_disruption_budget_meets_its_timeout_policy_and_its_events_tell_it(
    sandbox: Sandbox,
) -> None:
    # Given a pod whose budget never allows an eviction
    blocked, victim = held_by_a_budget(sandbox)
    node = node_of(sandbox, victim)
    # and another stack draining a node of the same zone (this stack allows one per zone): the node waits
    zone = (sandbox.kube.get_object("nodes", node) or {})["metadata"]["labels"][ZONE_LABEL]
    neighbour = next(
        node_of(sandbox, i)
        for i in in_service(sandbox)
        if node_of(sandbox, i) != node
        and (sandbox.kube.get_object("nodes", node_of(sandbox, i)) or {})["metadata"]["labels"][ZONE_LABEL]
        == zone
    )
    other = claim_as(sandbox, "stack-b", neighbour, hold_slot=True, annotate=False)
    assert other is not None

    # When its node's instance terminates, and the other stack's drain ends a little later
    sandbox.asg.terminate(victim)
    wait_for(
        lambda: (r := find_record(sandbox, victim)) is not None and r.slot_waiting_since is not None,
        30,
        "the node waiting",
    )
    other.release(neighbour, "rec-of-stack-b")
    action = wait_terminated(sandbox, victim, timeout=DRAIN_TIMEOUT + 60)

    # Then the drain waited for its timeout, then the force policy deleted the pod and the action completed
    record = wait_finished(sandbox, victim)
    assert record.outcome == "drain-timeout-forced"
    assert record.drain_started_at is not None
    assert action.finished_at - record.drain_started_at.timestamp() >= DRAIN_TIMEOUT  # type: ignore[operator]
    history = sandbox.kube.history()
    deletes = [e for e in history if e.resource == "pods" and e.verb == "delete" and e.name == blocked]
    assert deletes, "the blocked pod was deleted by the force policy"
    assert completed_before_drained(history, [action]) == []
    # And the node's Events, as `kubectl describe node` selects them, tell each decision in order
    api = core_api(sandbox)
    events = api.list_namespaced_event(
        "default", field_selector=f"involvedObject.kind=Node,involvedObject.name={node}"
    ).items
    # (in the order they were written: the API server's resourceVersions grow)
    nodecycle = sorted(
        (e for e in events if e.reporting_component == "nodecycle"),
        key=lambda e: int(e.metadata.resource_version or 0),
    )
    assert [e.reason for e in nodecycle] == [
        "WaitingForDisruptionBudget",
        "Cordoned",
        "EvictionBlocked",
        "DrainTimeout",
        "Drained",
        "LifecycleActionCompleted",
    ]
    assert "The disruption budget singleton" in (nodecycle[2].message or "")  # the budget, named
    # and the blocked pod has its own event
    pod_events = api.list_namespaced_event(
        "shop", field_selector=f"involvedObject.kind=Pod,involvedObject.name={blocked}"
    ).items
    assert [e.reason for e in pod_events if e.reporting_component == "nodecycle"] == ["EvictionBlocked"]
    # the singleton's replacement runs on another node now: its budget must not block that node's drain
    PolicyV1Api(sandbox.kube.api_client()).delete_namespaced_pod_disruption_budget("singleton", "shop")


def test_a_duplicated_work_message_drains_once(sandbox: Sandbox) -> None:
    # Given a terminating instance whose first work message is delivered twice
    victim = in_service(sandbox)[0]
    node = node_of(sandbox, victim)
    sandbox.kube.reset_history()
    sandbox.asg.terminate(victim)
    record = wait_for(lambda: _record_or_none(sandbox, victim), 20, "the lifecycle record")
    duplicate = json.dumps({"record_id": record.id, "seq": 0, "step": Step.ACQUIRE_SLOT.value})
    sqs = sandbox.client("sqs")
    for _ in range(2):
        sqs.send_message(QueueUrl=sandbox.runner.queue("DrainQueue").url, MessageBody=duplicate)

    # When the drain runs
    action = wait_terminated(sandbox, victim)
    wait_finished(sandbox, victim)

    # Then the node was claimed once, each pod evicted at most once, the action completed once
    history = sandbox.kube.history()
    claims = [
        e
        for e in history
        if e.kind == "Node" and e.name == node and e.verb == "patch" and _owner(e.object) == "nodecycle"
    ]
    assert len(claims) == 1
    evictions = [e.name for e in history if e.resource == "pods/eviction"]
    assert len(evictions) == len(set(evictions))
    assert action.outcome == "completed"
    assert action.late_calls == []


def test_a_node_deleted_under_its_running_pods_has_them_asked_to_leave_before_its_action_completes(
    sandbox: Sandbox,
) -> None:
    # Given an instance in service whose node object is deleted (kubectl delete node) while it runs: its pods stay
    # bound to the node's name, running, until the pod garbage collector's quarantine is over (40 s)
    victim = in_service(sandbox)[-1]
    node = node_of(sandbox, victim)
    bound = {
        p["metadata"]["name"]
        for p in sandbox.kube.objects("pods")
        if p["spec"].get("nodeName") == node and p["metadata"]["namespace"] == "shop"
    }
    assert bound
    sandbox.kube.reset_history()
    sandbox.kube.remove_node(node)

    # When its instance terminates
    sandbox.asg.terminate(victim)
    action = wait_terminated(sandbox, victim, timeout=DRAIN_TIMEOUT + 30)

    # Then those pods were evicted (as far as their PodDisruptionBudgets let them go) before the action was
    # completed, rather than the action completed at once and the instance terminated under them
    assert action.finished_at is not None
    evicted = {
        e.name
        for e in sandbox.kube.history()
        if e.time <= action.finished_at and e.resource == "pods/eviction"
    }
    assert evicted & bound
    assert wait_finished(sandbox, victim).outcome == "node-gone"


def test_a_node_that_is_gone_with_no_pod_bound_to_it_completes_the_action_at_once(sandbox: Sandbox) -> None:
    # Given an instance in service whose node object is deleted and its pods gone with it (the garbage collector's
    # quarantine over, their replacements elsewhere)
    victim = in_service(sandbox)[-1]
    quarantine = sandbox.kube.pod_gc_quarantine_seconds
    sandbox.kube.pod_gc_quarantine_seconds = 0
    try:
        sandbox.kube.remove_node(node_of(sandbox, victim))
        sandbox.kube.settle(timeout=30)
    finally:
        sandbox.kube.pod_gc_quarantine_seconds = quarantine

    # When its instance terminates, Then nothing is left to drain: the action is completed at once
    sandbox.asg.terminate(victim)
    action = wait_terminated(sandbox, victim, timeout=20)
    assert action.finished_at - action.started_at < 10  # type: ignore[operator]
    assert wait_finished(sandbox, victim).outcome == "node-not-found"


def claim_as(
    sandbox: Sandbox, owner: str, node: str, *, hold_slot: bool, annotate: bool = True
) -> DisruptionBudget | None:
    """Do to ``node`` what another nodecycle stack's cordon does: its annotations, and (if it is alive) its
    holder in the shared budget, whose handle is returned."""
    api = core_api(sandbox)
    budget = None
    if hold_slot:
        budget = DisruptionBudget(
            store=ConfigMapBudgetStore(lambda: api, "nodecycle"),
            nodes=KubeNodeInventory(lambda: api),
            clock=SystemClock(),
            metrics=FakeMetrics(),
            limits=BudgetLimits(max_unavailable=Quantity(value=5)),
            holder_ttl=timedelta(minutes=10),
            count_unavailable=False,
            owner=owner,
        )
        found = sandbox.kube.get_object("nodes", node) or {}
        zone = found["metadata"]["labels"][ZONE_LABEL]
        # the other stack's holder is for the node's instance (an entry of another instance under this node
        # name would be for a node gone with its instance: stale)
        instance = found["spec"]["providerID"].rsplit("/", 1)[-1]
        # a lifecycle of its own each time (a token): the record id is reused by this module's tests, and a
        # lifecycle that gave its slot back may not take it again
        claim = SlotRequest(node, instance, zone, owner, "rec-of-" + owner, token=uuid.uuid4().hex)
        assert budget.acquire(claim).granted
    if annotate:
        api.patch_node(
            node,
            {"metadata": {"annotations": {OWNER_ANNOTATION: owner, "nodecycle.io/in-progress": "{}"}}},
            _content_type="application/merge-patch+json",
        )
    return budget


def test_a_node_another_owner_is_draining_is_left_alone(sandbox: Sandbox) -> None:
    # Given a node that another nodecycle stack has claimed, and holds a budget slot for
    victim = in_service(sandbox)[1]
    node = node_of(sandbox, victim)
    other = claim_as(sandbox, "stack-b", node, hold_slot=True)
    assert other is not None
    sandbox.kube.reset_history()

    # When its instance terminates
    sandbox.asg.terminate(victim)
    action = wait_terminated(sandbox, victim, timeout=DRAIN_TIMEOUT + 30)

    # Then this stack neither cordoned, annotated nor evicted anything there, and settled its own action
    # after its drain timeout
    assert action.finished_at is not None
    history = [e for e in sandbox.kube.history() if e.time < action.finished_at]
    assert [e for e in history if e.kind == "Node" and e.name == node and e.source == "api"] == []
    node_pods = {
        p["metadata"]["name"] for p in sandbox.kube.objects("pods") if p["spec"].get("nodeName") == node
    }
    assert not any(e.resource == "pods/eviction" and e.name in node_pods for e in history)
    assert action.outcome == "completed"
    assert wait_finished(sandbox, victim).outcome == "node-owned-by:stack-b"
    other.release(node, "rec-of-stack-b")  # the other stack's drain ends too


def test_a_node_left_annotated_by_a_stack_whose_drain_died_is_adopted(sandbox: Sandbox) -> None:
    # Given a node another stack sharing the budget annotated, but holds no budget slot for any more (its drain
    # died, its holder expired: it wrote the budget as it took the slot, so the budget tells its drain is over; a
    # stack that writes nothing in this budget may drain the node under a budget of its own, and is left alone:
    # tests/integration/owners/test_adopt_with_split_budgets.py)
    victim = in_service(sandbox)[2]
    node = node_of(sandbox, victim)
    gone = claim_as(sandbox, "stack-gone", node, hold_slot=True)
    assert gone is not None
    gone.release(node, "rec-of-stack-gone")

    # When its instance terminates
    sandbox.asg.terminate(victim)
    action = wait_terminated(sandbox, victim)

    # Then this stack adopts the node and drains it like its own
    assert action.outcome == "completed"
    assert wait_finished(sandbox, victim).outcome == "drained"
    owners = {_owner(e.object) for e in sandbox.kube.history() if e.kind == "Node" and e.name == node}
    assert "nodecycle" in owners


def _owner(obj: dict[str, Any]) -> str | None:
    annotations = (obj.get("metadata") or {}).get("annotations") or {}
    owner = annotations.get(OWNER_ANNOTATION)
    return None if owner is None else str(owner)


def _record_or_none(sandbox: Sandbox, instance_id: str) -> object:
    if terminate_action(sandbox, instance_id) is None:
        return None
    try:
        return record_of(sandbox, instance_id)
    except AssertionError:
        return None


def test_a_node_whose_kubelet_is_gone_drains_without_waiting_for_pods_that_can_never_stop(
    sandbox: Sandbox,
) -> None:
    # Given a node running workload pods whose kubelet dies: the node turns NotReady (Unknown), and a pod
    # asked to leave stays Terminating for ever, as on a real cluster, until a force delete or the node's end
    def shop_pods(instance: str) -> list[str]:
        node = node_of(sandbox, instance)
        return [
            p["metadata"]["name"]
            for p in sandbox.kube.objects("pods", "shop")
            if p["spec"].get("nodeName") == node and not p["metadata"].get("deletionTimestamp")
        ]

    # (earlier tests replaced nodes: the newest may not run any workload yet)
    victim = next(i for i in in_service(sandbox) if shop_pods(i))
    node = node_of(sandbox, victim)
    on_node = shop_pods(victim)
    sandbox.kube.kill_kubelet(node, grace_seconds=1)
    wait_for(
        lambda: (
            not any(
                c["type"] == "Ready" and c["status"] == "True"
                for c in (sandbox.kube.get_object("nodes", node) or {})["status"]["conditions"]
            )
        ),
        10,
        "the node to be NotReady",
    )

    # When its instance terminates
    sandbox.asg.terminate(victim)
    action = wait_terminated(sandbox, victim, timeout=90)

    # Then the action was completed with the node's pods still Terminating on it (they cannot stop), the
    # outcome says so and why (the node is not Ready, not merely late), and the budget slot was released
    assert (action.outcome, action.result) == ("completed", "CONTINUE")
    assert action.finished_at is not None
    history = sandbox.kube.history()
    still_there = {
        e.name
        for e in history
        if e.kind == "Pod" and e.time <= action.finished_at and e.object["spec"].get("nodeName") == node
    } - {e.name for e in history if e.kind == "Pod" and e.removed and e.time <= action.finished_at}
    assert set(on_node) & still_there, "the dead node's pods were gone before completion: nothing was tested"
    record = wait_finished(sandbox, victim)
    assert record.outcome is not None
    assert "pods left terminating (node not ready)" in record.outcome, record.outcome
    budget = sandbox.kube.get_object("configmaps", "nodecycle-budget", "nodecycle")
    assert budget is not None
    holders = json.loads(budget["data"]["budget.json"])["holders"]
    assert all(h["node"] != node for h in holders)


WEBHOOK = "guard.example.com"


def test_a_pod_whose_eviction_keeps_failing_does_not_hold_the_drain_past_its_timeout(
    sandbox: Sandbox,
) -> None:
    # Given a node whose first pod a webhook guards: it answers each eviction of it 503 (not now, try again
    # later), as a read timeout or a 504 would fail it
    victim = next(i for i in in_service(sandbox) if len(_workload_pods(sandbox, node_of(sandbox, i))) > 1)
    node = node_of(sandbox, victim)
    guarded, *others = _workload_pods(sandbox, node)
    sandbox.kube.admission.deny(
        Denial(WEBHOOK, "CREATE", "pods/eviction", "shop", guarded, 503, "ServiceUnavailable", "not now")
    )
    sandbox.kube.reset_history()

    # When its instance terminates
    try:
        sandbox.asg.terminate(victim)
        action = wait_terminated(sandbox, victim, timeout=DRAIN_TIMEOUT + 60)
    finally:
        sandbox.kube.admission.clear()

    # Then the node's other pods were evicted, and at its drain timeout the force policy deleted the guarded pod
    # and the action was completed, the slot no longer held than the drain timeout allows
    record = wait_finished(sandbox, victim)
    assert record.outcome == "drain-timeout-forced"
    assert (action.outcome, action.result) == ("completed", "CONTINUE")
    assert record.drain_started_at is not None
    assert action.finished_at - record.drain_started_at.timestamp() < DRAIN_TIMEOUT + 20  # type: ignore[operator]
    history = sandbox.kube.history()
    assert any(e.resource == "pods/eviction" and e.name in others for e in history)
    assert any(e.resource == "pods" and e.verb == "delete" and e.name == guarded for e in history)
    assert {d.name for d in sandbox.kube.admission.denied()} == {guarded}


def test_a_forced_delete_the_api_server_refuses_is_asked_again_without_failing_the_drain(
    sandbox: Sandbox,
) -> None:
    # Given a pod whose budget never allows an eviction, and a webhook that denies its deletion (403), on an
    # in-service instance's node (once the group is steady: the pod would go to the emptiest node, that of an
    # earlier test's replacement still launching)
    wait_steady(sandbox)
    sandbox.kube.seed(
        {"deployments": [{"name": "pinned", "namespace": "shop", "replicas": 1, "pdb": {"minAvailable": 1}}]}
    )
    sandbox.kube.settle()
    (pod,) = [p for p in sandbox.kube.objects("pods", "shop") if p["metadata"]["name"].startswith("pinned")]
    pinned, node = pod["metadata"]["name"], pod["spec"]["nodeName"]
    victim = next(i for i in in_service(sandbox) if node_of(sandbox, i) == node)
    sandbox.kube.admission.deny(Denial(WEBHOOK, "DELETE", "pods", "shop", pinned, 403, "Forbidden", "pinned"))
    journal = sandbox.runner.journal
    seen = len(journal.invocations("DrainFunction"))

    # When its node's instance terminates, and the drain times out into its force policy
    try:
        sandbox.asg.terminate(victim)
        wait_for(
            lambda: len([d for d in sandbox.kube.admission.denied() if d.name == pinned]) >= 2,
            DRAIN_TIMEOUT + 60,
            "the forced delete refused, and asked again at the next poll",
        )
        # Then no invocation of the drain function failed for it (it used to crash the step into retries and
        # the dead-letter queue), and the drain goes on by its policy: once the webhook lets go, it ends
        failed = [i for i in journal.invocations("DrainFunction")[seen:] if i.failures or not i.ok]
        assert failed == []
    finally:
        sandbox.kube.admission.clear()
        PolicyV1Api(sandbox.kube.api_client()).delete_namespaced_pod_disruption_budget("pinned", "shop")
        AppsV1Api(sandbox.kube.api_client()).delete_namespaced_deployment("pinned", "shop")
    action = wait_terminated(sandbox, victim, timeout=90)
    assert (action.outcome, action.result) == ("completed", "CONTINUE")
    assert (wait_finished(sandbox, victim).outcome or "").startswith("drain-timeout-forced")


def _workload_pods(sandbox: Sandbox, node: str) -> list[str]:
    """The node's pods a drain evicts, in the order the drain asks them."""
    pods = core_api(sandbox).list_pod_for_all_namespaces(field_selector=f"spec.nodeName={node}").items
    found = (pod.metadata for pod in pods if pod.metadata is not None)
    return [str(meta.name) for meta in found if meta.namespace == "shop" and not meta.deletion_timestamp]


def test_a_drain_whose_action_another_hook_abandoned_ends_and_frees_its_slot(sandbox: Sandbox) -> None:
    # Given another tool's terminate hook beside nodecycle's, and a node whose drain a pod that no eviction may
    # move holds up
    autoscaling = sandbox.client("autoscaling")
    sandbox.asg.put_hook(HookSpec("other-tool", TERMINATING, 300, "CONTINUE"))
    wait_steady(sandbox)  # (the pod on an in-service instance's node, as above)
    sandbox.kube.seed(
        {"deployments": [{"name": "held", "namespace": "shop", "replicas": 1, "pdb": {"minAvailable": 1}}]}
    )
    try:
        sandbox.kube.settle()
        (pod,) = [p for p in sandbox.kube.objects("pods", "shop") if p["metadata"]["name"].startswith("held")]
        node = pod["spec"]["nodeName"]
        victim = next(i for i in in_service(sandbox) if node_of(sandbox, i) == node)
        sandbox.asg.terminate(victim)
        wait_for(
            lambda: (r := find_record(sandbox, victim)) is not None and r.drain_started_at is not None,
            30,
            "the drain under way",
        )

        # When the other tool completes its action with ABANDON mid-drain
        other = next(a for a in sandbox.aws.actions() if a.instance_id == victim and a.hook == "other-tool")
        autoscaling.complete_lifecycle_action(
            AutoScalingGroupName=sandbox.asg.name,
            LifecycleHookName="other-tool",
            LifecycleActionToken=other.token,
            LifecycleActionResult="ABANDON",
        )

        # Then the instance is gone at once, nodecycle's action with it (AWS: ABANDON stops the other hooks)
        assert victim not in sandbox.asg.instances()
        (ours,) = [
            a for a in sandbox.aws.actions() if a.instance_id == victim and a.hook == "nodecycle-terminate"
        ]
        assert ours.outcome == "cancelled"
        # And nodecycle's lifecycle still ends, on its instance's or node's going (not at its drain timeout),
        # its budget slot free
        record = wait_finished(sandbox, victim)
        # (instance-down: a poll found the instance terminated while its node lingered, as on EKS; drained: the
        # node and its pods went between a poll's read of the node and its list of the pods, as a busy machine
        # interleaves them; either way on their going, not a drain timeout's outcome)
        assert record.outcome in ("instance-down", "node-gone", "drained")
        budget = sandbox.kube.get_object("configmaps", "nodecycle-budget", "nodecycle")
        assert budget is not None
        document = json.loads(budget["data"]["budget.json"])
        assert all(entry["node"] != node for entry in [*document["holders"], *document.get("waiters", [])])
    finally:
        autoscaling.delete_lifecycle_hook(
            AutoScalingGroupName=sandbox.asg.name, LifecycleHookName="other-tool"
        )
        PolicyV1Api(sandbox.kube.api_client()).delete_namespaced_pod_disruption_budget("held", "shop")
        AppsV1Api(sandbox.kube.api_client()).delete_namespaced_deployment("held", "shop")


def test_ec2_telling_of_a_termination_through_the_hook_disrupts_nothing_more(sandbox: Sandbox) -> None:
    # Given an instance drained and terminated through its hook
    victim = in_service(sandbox)[0]
    node = node_of(sandbox, victim)
    sandbox.asg.terminate(victim)
    action = wait_terminated(sandbox, victim)
    assert (action.outcome, action.finished_at is not None) == ("completed", True)
    wait_finished(sandbox, victim)

    # When EC2's state changes of that termination reach intake, as on AWS after every termination
    told = wait_for(
        lambda: (
            (r := records(sandbox).get(record_id(victim, Transition.STATE_CHANGE, ""))) is not None
            and r.finished
            and r
        ),
        30,
        "the lifecycle of EC2's state change",
    )

    # Then that lifecycle ends having evicted nothing after the action's completion, and nothing of the node
    # is left in the budget
    assert told.finished
    # and it ran no step at all: the terminate lifecycle's completion wrote it over (its cleanup frees what it
    # would), rather than a second lifecycle of a dozen calls per terminated instance
    terminate = record_of(sandbox, victim)
    assert (told.plan, told.seq, told.extra.get(ENDED_BY)) == ((Step.DONE,), 0, terminate.id)
    assert terminate.extra.get(ENDS_ITS_INSTANCE) is True
    evicted_after = [
        e.name
        for e in sandbox.kube.history()
        if e.resource == "pods/eviction" and e.time > action.finished_at  # type: ignore[operator]
    ]
    assert evicted_after == []
    budget = sandbox.kube.get_object("configmaps", "nodecycle-budget", "nodecycle")
    assert budget is not None
    document = json.loads(budget["data"]["budget.json"])
    assert all(entry["node"] != node for entry in [*document["holders"], *document.get("waiters", [])])
