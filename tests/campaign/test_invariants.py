"""The campaign's judges can fail: each one, given a recorded world that breaks its invariant, says so
(and stays quiet on the same world without the break)."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

from nodecycle_sandbox.aws.records import TERMINATING, ActionRecord, InstanceHistory
from nodecycle_sandbox.chaos.invariants import _forced_from, check
from nodecycle_sandbox.chaos.plan import draw
from nodecycle_sandbox.chaos.world import BUDGET, DRAIN_TIMEOUT, AddressSeen, Observation, lifecycle_outcome
from nodecycle_sandbox.faults import Fault, Firing
from nodecycle_sandbox.kube import HistoryEntry
from nodecycle_sandbox.runner.cfn_yaml import load_template

ROOT = Path(__file__).resolve().parents[2]

NODE = "ip-10-0-1-10.eu-west-1.compute.internal"
T0 = 1000.0


def _node(
    at: float, *, owner: str | None = None, cordoned: bool = False, removed: bool = False
) -> HistoryEntry:
    annotations = {} if owner is None else {"nodecycle.io/owner": owner, "nodecycle.io/in-progress": "{}"}
    obj: dict[str, Any] = {
        "kind": "Node",
        "metadata": {
            "name": NODE,
            "annotations": annotations,
            "labels": {"topology.kubernetes.io/zone": "eu-west-1a"},
        },
        "spec": {"providerID": "aws:///eu-west-1a/i-1", "unschedulable": cordoned},
    }
    return HistoryEntry(0, at, "patch", "nodes", "", NODE, "api", removed, obj)


def _pod(at: float, name: str, *, removed: bool = False) -> HistoryEntry:
    obj = {"kind": "Pod", "metadata": {"name": name, "namespace": "s"}, "spec": {"nodeName": NODE}}
    return HistoryEntry(0, at, "delete" if removed else "create", "pods", "s", name, "sandbox", removed, obj)


def _terminate(finished: float, started: float = T0 + 1) -> ActionRecord:
    return ActionRecord(
        token="tok",
        group="g",
        hook="nodecycle-terminate",
        instance_id="i-1",
        transition=TERMINATING,
        default_result="CONTINUE",
        heartbeat_timeout=30,
        global_timeout=180,
        started_at=started,
        finished_at=finished,
        result="CONTINUE",
        outcome="completed",
    )


def _observation(history: list[HistoryEntry], **more: Any) -> Observation:
    values: dict[str, Any] = {
        "scenario": draw(1, 0, faults=False),
        "groups": {"g": "chaos-a"},
        "started_at": T0,
        "acting_at": T0,
        "quiescent": True,
        "left_over": [],
        "actions": [_terminate(T0 + 10)],
        "instances": [InstanceHistory("i-1", "g", "eu-west-1a", NODE, T0, T0, T0 + 1, T0 + 12, "scale-in")],
        "history": history,
        "addresses": [],
        "final_addresses": {},
        "outcomes": {"tok": "drained"},
        "lost_kubelet": None,
        "firings": [],
    }
    return Observation(**{**values, **more})


def _judged(observation: Observation) -> set[str]:
    return {v.invariant for v in check(observation)}


def test_a_drain_completed_with_pods_left_is_a_violation_unless_its_outcome_says_why() -> None:
    # Given a node cordoned at 2 s whose pod is still there when its action completes at 10 s
    history = [
        _pod(T0, "web-1"),
        _node(T0 + 2, owner="chaos-a", cordoned=True),
        _pod(T0 + 11, "web-1", removed=True),
    ]

    # Then "drained" is judged wrong, and "drain-timeout-continued" explains it, once the drain timeout (20 s from
    # the cordon) is over
    assert "drain" in _judged(_observation(history))
    timed_out = [*history[:2], _pod(T0 + 24, "web-1", removed=True)]
    continued = _observation(
        timed_out, actions=[_terminate(T0 + 23)], outcomes={"tok": "drain-timeout-continued"}
    )
    assert "drain" not in _judged(continued)
    # ...and with the pod gone before completion, nothing is wrong
    emptied = [
        _pod(T0, "web-1"),
        _node(T0 + 2, owner="chaos-a", cordoned=True),
        _pod(T0 + 5, "web-1", removed=True),
    ]
    assert _judged(_observation(emptied)) == set()


def test_a_pod_created_after_the_cordon_is_not_one_the_drain_answers_for_but_one_created_before_it_is() -> (
    None
):
    # Given a node cordoned at 2 s, its pod of the cordon gone at 5 s, and a pod placed on it at 3 s (one that
    # tolerates the cordon's taint) still there when the action completes at 10 s
    history = [
        _pod(T0, "web-1"),
        _node(T0 + 2, owner="chaos-a", cordoned=True),
        _pod(T0 + 3, "agent-2"),
        _pod(T0 + 5, "web-1", removed=True),
    ]
    # Then nothing is wrong: as kubectl drain, the drain answers for the pods there at its cordon
    assert _judged(_observation(history)) == set()
    # But a pod of the same name created before the cordon, still there, is one it answers for
    before = [_pod(T0, "agent-2"), *history[:2], *history[3:]]
    assert "drain" in _judged(_observation(before))
    # And a pod of the cordon removed and created again under its name after it is a new one, not waited for
    again = [*history[:2], _pod(T0 + 2.5, "web-1", removed=True), _pod(T0 + 3, "web-1")]
    assert _judged(_observation(again)) == set()


def test_an_adopted_actions_drain_is_judged_by_the_outcome_of_the_lifecycle_the_sweeper_adopted() -> None:
    # Given an action whose event was lost: the sweeper adopted it, and the lifecycle it started (its record
    # named by instance and hook: no API tells the sweeper the action's token) ended by the drain timeout's
    # policy (20 s from the cordon), the pod still on the node when the action was completed
    history = [
        _pod(T0, "web-1"),
        _node(T0 + 2, owner="chaos-a", cordoned=True),
        _pod(T0 + 24, "web-1", removed=True),
    ]
    items = {"i-1/terminate/adopted:nodecycle-terminate": {"outcome": {"S": "drain-timeout-continued"}}}

    # When the campaign reads the outcomes of the actions' lifecycles
    outcomes = {"tok": lifecycle_outcome(items.get, _terminate(T0 + 23))}

    # Then the adopted lifecycle's is the action's, and it explains the pod left, as its event's would have
    assert outcomes == {"tok": "drain-timeout-continued"}
    assert "drain" not in _judged(_observation(history, actions=[_terminate(T0 + 23)], outcomes=outcomes))


def test_another_owners_annotation_or_a_claim_cleared_mid_drain_is_a_violation() -> None:
    # Given the node of a chaos-a group annotated by chaos-b
    assert "ownership" in _judged(_observation([_node(T0 + 2, owner="chaos-b", cordoned=True)]))
    # Given chaos-a's claim cleared at 5 s, while its terminate action ran until 10 s
    cleared = [_node(T0 + 2, owner="chaos-a", cordoned=True), _node(T0 + 5, owner=None, cordoned=True)]
    assert "ownership" in _judged(_observation(cleared))
    # ...but cleared after the action completed, as the cleanup does, it is fine
    after = [_node(T0 + 2, owner="chaos-a", cordoned=True), _node(T0 + 11, owner=None, cordoned=True)]
    assert "ownership" not in _judged(_observation(after))


def test_a_slot_held_too_long_is_a_violation() -> None:
    # Given a node cordoned at 2 s whose action completes 60 s later (limit: 20 + 2 + 20 s)
    history = [_node(T0 + 2, owner="chaos-a", cordoned=True)]
    late = _observation(history, actions=[_terminate(T0 + 62)])
    assert "slot-held" in _judged(late)
    assert "slot-held" not in _judged(_observation(history))


def test_a_slot_is_judged_until_its_completion_is_first_asked_for_refused_or_not() -> None:
    # Given a node cordoned at 2 s whose action completes at 62 s, after Auto Scaling refused completions
    history = [_node(T0 + 2, owner="chaos-a", cordoned=True)]

    def refused(at: float) -> Firing:
        return Firing(at, "t", "aws-throttle", "autoscaling.CompleteLifecycleAction i-1")

    # When the first refusal came 10 s after the cordon: the drain ended then, the rest was AWS's throttling
    asked_early = _observation(history, actions=[_terminate(T0 + 62)], firings=[refused(12), refused(40)])
    # When it came 50 s after the cordon, or named another instance: the drain itself held the slot too long
    asked_late = _observation(history, actions=[_terminate(T0 + 62)], firings=[refused(52)])
    other = [Firing(12, "t", "aws-throttle", "autoscaling.CompleteLifecycleAction i-2")]
    asked_for_another = _observation(history, actions=[_terminate(T0 + 62)], firings=other)

    # Then only the first is within the limit (20 + 2 + 20 s)
    assert "slot-held" not in _judged(asked_early)
    assert "slot-held" in _judged(asked_late)
    assert "slot-held" in _judged(asked_for_another)


def test_a_slot_held_up_by_faults_on_its_own_messages_is_excused_for_their_cost_only() -> None:
    # Given a node cordoned at 2 s whose action completes at 50 s: 48 s held, the limit is 20 + 2 + 20 s
    history = [_node(T0 + 2, owner="chaos-a", cordoned=True)]
    scenario = draw(1, 0, faults=False).with_faults(
        (Fault("f1", "sqs-delay", value=4), Fault("f2", "sqs-drop"))
    )

    def judged(*firings: Firing) -> set[str]:
        return _judged(
            _observation(history, scenario=scenario, actions=[_terminate(T0 + 50)], firings=list(firings))
        )

    def late(at: float, about: str = "i-1") -> Firing:
        return Firing(at, "f1", "sqs-delay", f"DrainQueue m-{at} {about}")

    # When two of its drain messages came 4 s late each: 8 s excused
    assert "slot-held" not in judged(late(20), late(30))
    # When only one did, or the late ones were another instance's, or came after its drain: not excused
    assert "slot-held" in judged(late(20))
    assert "slot-held" in judged(late(20, "i-2"), late(30, "i-2"))
    assert "slot-held" in judged(late(20), late(55))
    # When one of its messages was lost: it waited for the sweeper to resume it, which is excused
    assert "slot-held" not in judged(Firing(20, "f2", "sqs-drop", "DrainQueue m-1 i-1"))


def test_a_slot_held_up_by_its_lone_message_held_back_by_a_reorder_is_excused_that_second() -> None:
    # Given a node cordoned at 2 s whose action completes at 44.5 s: 42.5 s held, the limit is 20 + 2 + 20 s
    history = [_node(T0 + 2, owner="chaos-a", cordoned=True)]

    def judged(*firings: Firing) -> set[str]:
        return _judged(_observation(history, actions=[_terminate(T0 + 44.5)], firings=list(firings)))

    # When a reorder found its drain message alone in its batch and held it back a second (the runner names
    # the instance a lone message is about): that second was the fault's, not the drain's
    assert "slot-held" not in judged(Firing(20, "r", "sqs-reorder", "DrainQueue batch of 1 i-1"))
    # When the batch held back was another instance's, or a shuffled batch of several (none late): not excused
    assert "slot-held" in judged(Firing(20, "r", "sqs-reorder", "DrainQueue batch of 1 i-2"))
    assert "slot-held" in judged(Firing(20, "r", "sqs-reorder", "DrainQueue batch of 3"))


def test_addresses_moved_off_an_instance_in_service_doubled_or_left_behind_are_violations() -> None:
    tags = {"nodecycle:owner": "chaos-a", "nodecycle:instance-id": "i-1"}
    instances = [
        InstanceHistory("i-1", "g", "eu-west-1a", NODE, T0, T0, None, None),
        InstanceHistory("i-2", "g", "eu-west-1b", "n2", T0, T0, None, None),
    ]
    # Given an address that moves from i-1 (in service) to i-2
    moved = [AddressSeen(T0 + 1, {"a-1": ("i-1", tags)}), AddressSeen(T0 + 2, {"a-1": ("i-2", tags)})]
    assert "addresses" in _judged(_observation([], instances=instances, actions=[], addresses=moved))
    # Given an instance holding two of our addresses
    double = [AddressSeen(T0 + 1, {"a-1": ("i-1", tags), "a-2": ("i-1", tags)})]
    assert "addresses" in _judged(_observation([], instances=instances, actions=[], addresses=double))
    # Given an allocated address left unassociated after the late sweep
    leaked = _observation([], instances=instances, actions=[], final_addresses={"a-1": (None, tags)})
    assert "addresses" in _judged(leaked)
    # ...and an address that stays where it is, nothing
    stays = [AddressSeen(T0 + 1, {"a-1": ("i-1", tags)}), AddressSeen(T0 + 2, {"a-1": ("i-1", tags)})]
    assert _judged(_observation([], instances=instances, actions=[], addresses=stays)) == set()


def test_too_many_nodes_drained_at_once_exceed_the_budget() -> None:
    # Given three nodes of one zone cordoned at once (limits: 2 in all, 1 per zone)
    history = []
    for n in range(3):
        entry = _node(T0 + 1 + n, owner="chaos-a", cordoned=True)
        history.append(HistoryEntry(0, entry.time, "patch", "nodes", "", f"n{n}", "api", False, entry.object))
    assert "budget" in _judged(_observation(history, actions=[]))


def test_a_node_whose_pods_are_evicted_without_a_cordon_counts_against_the_budget() -> None:
    # Given another node of the zone cordoned at 1 s (limits: 2 in all, 1 per zone)
    other = _node(T0 + 1, owner="chaos-a", cordoned=True)
    cordoned = HistoryEntry(0, other.time, "patch", "nodes", "", "n0", "api", False, other.object)
    uncordoned = replace(cordoned, time=T0 + 1.5, object=_node(0).object)
    evicted = replace(_pod(T0 + 2, "web-1"), verb="create", resource="pods/eviction", source="api")
    # When a drain evicts a pod of the node at 2 s, never having cordoned it, while the other is still cordoned
    history = [_node(T0), _pod(T0, "web-1"), cordoned, evicted]
    # Then two nodes of one zone were disrupted at once: the eviction is a disruption the budget counts
    assert "budget" in _judged(_observation(history))
    # But with the other node uncordoned before it, one node at a time was disrupted
    assert "budget" not in _judged(_observation([*history[:3], uncordoned, evicted]))


def test_a_slot_held_by_the_force_policy_asking_again_for_deletes_a_fault_refused_is_excused_its_slack() -> (
    None
):
    # Given a node cordoned at 2 s whose action completes at 80 s (78 s held; the limit is 20 + 2 + 20 s), one of
    # its pods having been on it
    history = [_node(T0 + 2, owner="chaos-a", cordoned=True), _pod(T0, "web-1")]

    def judged(*firings: Firing) -> set[str]:
        return _judged(_observation(history, actions=[_terminate(T0 + 80)], firings=list(firings)))

    # When the forced delete of that pod was refused by a webhook: the force grace's slack (60 s) is excused
    assert "slot-held" not in judged(Firing(25, "f1", "kube-webhook-deny", "DELETE pods web-1"))
    # When the delete was only slow (it was done), or another node's pod's was refused: not excused
    assert "slot-held" in judged(Firing(25, "f1", "kube-slow", "DELETE pods web-1"))
    assert "slot-held" in judged(Firing(25, "f1", "kube-webhook-deny", "DELETE pods other-1"))
    # and firings that name no pod are read without fault
    assert "slot-held" in judged(Firing(25, "f1", "aws-throttle", "sqs.ListQueues"))


def _budget_holding(at: float, *nodes: str, owner: str = "chaos-a") -> HistoryEntry:
    document = {"holders": [{"node": node, "owner": owner, "instanceId": "i-1"} for node in nodes]}
    obj = {"kind": "ConfigMap", "data": {BUDGET[2]: json.dumps(document)}}
    return HistoryEntry(0, at, "update", "configmaps", BUDGET[0], BUDGET[1], "api", False, obj)


def test_a_drain_whose_first_try_was_a_read_of_its_node_that_failed_is_timed_from_that_read() -> None:
    # Given a terminate started at 1 s whose node was granted a slot at 3 s and cordoned at 6 s; the product's
    # drain time runs from its first try at the cordon, and a read of the node that fails is such a try (seed 52
    # scenario 0: a read failed 1 s before the first refused PATCH, and the force policy's deletes at the
    # product's timeout were judged a breach made before it)
    history = [_budget_holding(T0 + 3, NODE), _node(T0 + 6, owner="chaos-a", cordoned=True)]

    def forced_from(*firings: Firing) -> float:
        return _forced_from(_observation(history, firings=list(firings)))[NODE]

    # Then a read refused after the grant starts the drain's time; one before it (the slot's ask, which reads
    # the node too) does not, nor a read of another node
    assert forced_from(Firing(4, "f1", "kube-error", f"GET nodes {NODE}")) == T0 + 4 + DRAIN_TIMEOUT
    assert forced_from(Firing(2, "f1", "kube-error", f"GET nodes {NODE}")) == T0 + 6 + DRAIN_TIMEOUT
    assert forced_from(Firing(4, "f1", "kube-error", "GET nodes other")) == T0 + 6 + DRAIN_TIMEOUT
    assert forced_from() == T0 + 6 + DRAIN_TIMEOUT


def test_the_judges_read_the_budget_configmap_the_stacks_write() -> None:
    # The "ownership" judge's budget entries, the quiescence check "no budget entry left" and the clean-up between
    # scenarios read BUDGET; the campaign's stacks keep the template's BudgetNamespace and the cluster side
    # deploy/rbac.yaml ships. Named otherwise, those checks read a ConfigMap nobody writes and can never fail.
    template = load_template(ROOT / "template.yaml")
    namespace = template["Parameters"]["BudgetNamespace"]["Default"]
    shipped = [
        (d["metadata"]["namespace"], d["metadata"]["name"])
        for d in yaml.safe_load_all((ROOT / "deploy" / "rbac.yaml").read_text())
        if d and d["kind"] == "ConfigMap"
    ]
    assert BUDGET[:2] == (namespace, "nodecycle-budget")
    assert shipped == [BUDGET[:2]]


def test_a_budget_slot_held_for_one_owners_node_under_another_owners_id_is_a_violation() -> None:
    # Given the budget document written with i-1's node (group g, owner chaos-a) among its holders
    def judged(owner: str) -> set[str]:
        return _judged(_observation([_budget_holding(T0 + 3, NODE, owner=owner)]))

    # Then held under chaos-b's id it breaks invariant 3; under its own owner's, nothing
    assert "ownership" in judged("chaos-b")
    assert "ownership" not in judged("chaos-a")


def test_a_drain_completed_as_timed_out_before_its_timeout_is_a_violation() -> None:
    # Given a node cordoned at 2 s (its drain timeout, 20 s, over at 22 s) whose pod is still there when its
    # action completes, the lifecycle's outcome saying the drain timed out
    history = [
        _pod(T0, "web-1"),
        _node(T0 + 2, owner="chaos-a", cordoned=True),
        _pod(T0 + 40, "web-1", removed=True),
    ]

    def judged(finished: float, outcome: str) -> set[str]:
        return _judged(_observation(history, actions=[_terminate(finished)], outcomes={"tok": outcome}))

    # When it completed at 10 s: the outcome's timeout had not come, the drain was cut short (invariant 2: not
    # completed before its drain finished or its drain timeout policy applied)
    assert "drain" in judged(T0 + 10, "drain-timeout-forced-incomplete")
    assert "drain" in judged(T0 + 10, "drain-timeout-unlisted")
    # ...nor was the action's global timeout near, which the engine's guard completes it for
    assert "drain" in judged(T0 + 10, "global-timeout-near")
    # When it completed past the drain timeout (or the guard, past where the drain's deadline is capped): the
    # policy applied, nothing is wrong
    assert "drain" not in judged(T0 + 23, "drain-timeout-forced-incomplete")
    assert "drain" not in judged(T0 + 23, "drain-timeout-unlisted")
    assert "drain" not in judged(T0 + 1 + 180 - 30, "global-timeout-near")
    # And an outcome that names a fact rather than a time (the node gone) is judged as before
    assert "drain" not in judged(T0 + 10, "node-gone")


def test_an_address_taken_off_an_instance_in_service_is_a_violation_even_when_it_stays_allocated() -> None:
    tags = {"nodecycle:owner": "chaos-a", "nodecycle:instance-id": "i-1"}
    pool = {"nodecycle:owner": "chaos-b", "nodecycle:pool": "chaos-pool"}
    instances = [
        InstanceHistory("i-1", "g", "eu-west-1a", NODE, T0, T0, None, None),
        InstanceHistory("i-2", "g", "eu-west-1b", "n2", T0, T0, T0 + 5, T0 + 6),
    ]

    def judged(*looks: AddressSeen) -> set[str]:
        return _judged(_observation([], instances=instances, actions=[], addresses=list(looks)))

    # Given an address disassociated from i-1 while it is in service (a sweeper that took it for gone), seen free,
    # then released by a later sweep or given to another instance: it never showed a direct move nor a release
    # from an instance in service
    taken = [AddressSeen(T0 + 1, {"a-1": ("i-1", tags)}), AddressSeen(T0 + 2, {"a-1": (None, tags)})]
    assert "addresses" in judged(*taken, AddressSeen(T0 + 3, {}))
    assert "addresses" in judged(*taken, AddressSeen(T0 + 3, {"a-1": ("i-2", tags)}))
    # ...and a pool's address taken off it, back in its pool
    assert "addresses" in judged(
        AddressSeen(T0 + 1, {"p-1": ("i-1", pool)}), AddressSeen(T0 + 2, {"p-1": (None, pool)})
    )
    # But taken off i-2 once its terminate began (its release step), nothing is wrong
    off_terminating = [
        AddressSeen(T0 + 4, {"p-1": ("i-2", pool)}),
        AddressSeen(T0 + 5.5, {"p-1": (None, pool)}),
    ]
    assert judged(*off_terminating) == set()


def test_a_slot_is_held_from_its_grant_even_when_its_node_is_never_cordoned() -> None:
    # Given a node granted its slot at 3 s (the budget's document names it among the holders) whose cordon never
    # lands (a webhook refusing every PATCH of it), its action completed at 62 s: the slot held 59 s, where the
    # limit is 20 + 2 + 20 s
    granted = [_budget_holding(T0 + 3, NODE)]
    assert "slot-held" in _judged(_observation(granted, actions=[_terminate(T0 + 62)]))
    # ...and one whose cordon came 30 s after its grant, its action completed 30 s after the cordon
    late_cordon = [*granted, _node(T0 + 33, owner="chaos-a", cordoned=True)]
    assert "slot-held" in _judged(_observation(late_cordon, actions=[_terminate(T0 + 63)]))
    # But completed 27 s after its grant (the drain's timeout policy after a refused cordon), nothing is wrong
    assert "slot-held" not in _judged(_observation(granted, actions=[_terminate(T0 + 30)]))
    # nor is a grant for another node, or one before its action began (another lifecycle's)
    elsewhere = [_budget_holding(T0 + 3, "other"), _budget_holding(T0 + 0.5, NODE)]
    assert "slot-held" not in _judged(_observation(elsewhere, actions=[_terminate(T0 + 62)]))


def test_a_wait_for_a_slot_again_before_the_cordon_is_not_counted_as_holding_one() -> None:
    # Given a node granted at 3 s, its slot lost at 5 s (the budget's document without it: it waits again), granted
    # again at 30 s and cordoned at 31 s, its action completed at 62 s: 32 s held since the grant its cordon went
    # ahead on (design invariant 9: time waiting for a slot does not count against the drain)
    history = [
        _budget_holding(T0 + 3, NODE),
        _budget_holding(T0 + 5),
        _budget_holding(T0 + 30, NODE),
        _node(T0 + 31, owner="chaos-a", cordoned=True),
    ]
    assert "slot-held" not in _judged(_observation(history, actions=[_terminate(T0 + 62)]))


def test_a_node_uncordoned_through_the_api_while_its_drain_was_under_way_is_a_violation() -> None:
    # Given chaos-a's node claimed and cordoned at 2 s, its terminate action running until 10 s
    claimed = _node(T0 + 2, owner="chaos-a", cordoned=True)
    # When an API caller uncordoned it at 5 s, its claim left in place (another owner's sweeper that took it for
    # an orphan): the drain's pods may be scheduled back on it, and the budget no longer counts it
    assert "ownership" in _judged(_observation([claimed, _node(T0 + 5, owner="chaos-a", cordoned=False)]))
    # But uncordoned after its action completed (a cleanup), nothing is wrong
    assert "ownership" not in _judged(
        _observation([claimed, _node(T0 + 11, owner="chaos-a", cordoned=False)])
    )
    # nor is a node registered again by its kubelet (not an API caller's write)
    again = _node(T0 + 5, owner="chaos-a", cordoned=False)
    kubelet = HistoryEntry(0, again.time, "create", "nodes", "", NODE, "sandbox", False, again.object)
    assert "ownership" not in _judged(_observation([claimed, kubelet]))


def test_the_judges_without_a_test_of_their_own_can_fail_too() -> None:
    # "global-timeout": an action completed past its global timeout (181 s here), or ended by Auto Scaling's
    late = _observation([], actions=[_terminate(T0 + 190)], outcomes={"tok": "global-timeout-near"})
    assert "global-timeout" in _judged(late)
    ended = replace(_terminate(T0 + 181), outcome="global-timeout", result="CONTINUE")
    assert "global-timeout" in _judged(_observation([], actions=[ended]))
    # "repair": the scenario did not settle after its sweeps
    unsettled = _observation([], quiescent=False, left_over=["node n still annotated by chaos-a"])
    assert {v.invariant for v in check(unsettled)} == {"repair"}
    # "budget", per zone only: two nodes of one zone drained at once (limits: 2 in all, 1 per zone)
    history = []
    for n in range(2):
        entry = _node(T0 + 1 + n, owner="chaos-a", cordoned=True)
        history.append(HistoryEntry(0, entry.time, "patch", "nodes", "", f"n{n}", "api", False, entry.object))
    (zone,) = [v for v in check(_observation(history, actions=[])) if v.invariant == "budget"]
    assert "in eu-west-1a" in zone.detail


def test_a_live_node_left_cordoned_without_nodecycles_annotations_is_left_unsettled() -> None:
    from nodecycle_sandbox.chaos.world import cordons_left

    # Given the scenario's instance in service, its node cordoned, nodecycle's annotations gone (its cleanup ran,
    # the cordon stayed: no one else in the campaign's stories cordons a node)
    live = InstanceHistory("i-1", "g", "eu-west-1a", NODE, T0, T0)
    cordoned = _node(T0 + 2, cordoned=True).object
    # Then the cordon is left over: the node takes no pods, and nothing else will lift it
    assert cordons_left([cordoned], [live]) == [f"node {NODE} of a live instance left cordoned"]
    # But an uncordoned node, a node of a terminated instance (reported as still there), or another's node is not
    assert cordons_left([_node(T0 + 3).object], [live]) == []
    gone = replace(live, terminated_at=T0 + 9)
    assert cordons_left([cordoned], [gone]) == []
    assert cordons_left([cordoned], []) == []


def _budget_doc(
    at: float, holders: list[tuple[str, str]], waiters: list[tuple[str, str]], *, in_progress: bool = True
) -> HistoryEntry:
    """The budget document at ``at``; its waiters drains in progress by their requests (``inProgress``) or not."""

    def entries(pairs: list[tuple[str, str]]) -> list[dict[str, Any]]:
        return [{"node": node, "zone": zone, "owner": "chaos-a", "instanceId": "i-x"} for node, zone in pairs]

    waiting = [{**w, "inProgress": True} if in_progress else w for w in entries(waiters)]
    document = {"holders": entries(holders), "waiters": waiting}
    obj = {"kind": "ConfigMap", "data": {BUDGET[2]: json.dumps(document)}}
    return HistoryEntry(0, at, "update", "configmaps", BUDGET[0], BUDGET[1], "api", False, obj)


def test_a_node_not_yet_touched_granted_the_slot_a_drain_in_progress_waited_for_is_a_violation() -> None:
    # Given i-1's node cordoned at 2 s (its drain under way) that lost its slot and waits in line at 3 s, while
    # another node of eu-west-1b holds one (limits: 2 in all, 1 per zone)
    waiting = [
        _node(T0 + 2, owner="chaos-a", cordoned=True),
        _budget_doc(T0 + 3, [("h0", "eu-west-1b")], [(NODE, "eu-west-1a")]),
    ]
    # When a node never cordoned is granted at 4 s the slot the drain in progress fitted in (invariant 9)
    granted = _budget_doc(T0 + 4, [("h0", "eu-west-1b"), ("g", "eu-west-1c")], [(NODE, "eu-west-1a")])
    assert "precedence" in _judged(_observation([*waiting, granted]))
    # But granted beside it, leaving it its room (a slot of another zone, with room in all), nothing is wrong
    beside = _budget_doc(T0 + 4, [("g", "eu-west-1c")], [(NODE, "eu-west-1a")])
    assert "precedence" not in _judged(_observation([*waiting, beside]))
    # nor when the waiter is not a drain in progress by its request (not yet touched either, its node cordoned or
    # not: the order of the line decides)
    untouched = [_budget_doc(T0 + 3, [("h0", "eu-west-1b")], [(NODE, "eu-west-1a")], in_progress=False)]
    later = _budget_doc(
        T0 + 4, [("h0", "eu-west-1b"), ("g", "eu-west-1c")], [(NODE, "eu-west-1a")], in_progress=False
    )
    assert "precedence" not in _judged(_observation([*untouched, later]))
    assert "precedence" not in _judged(_observation([waiting[0], *untouched, later]))


def test_a_pod_deleted_before_its_drains_timeout_counted_from_the_cordon_is_a_violation() -> None:
    # Given a terminate action started at 1 s whose node waited for its slot and was cordoned at 12 s
    history = [_pod(T0, "web-1"), _node(T0 + 12, owner="chaos-a", cordoned=True)]

    def deleted(at: float) -> HistoryEntry:
        return replace(_pod(at, "web-1", removed=True), source="api")

    actions = [_terminate(T0 + 40)]
    # When the force policy deletes its pod at 25 s: 24 s after the action began, but 13 s after the cordon (the
    # drain timeout is 20 s): the wait for the slot was counted against the drain's timeout (invariant 9)
    early = _observation([*history, deleted(T0 + 25)], actions=actions)
    assert "precedence" in _judged(early)
    # But deleted once the drain's own timeout was over (at 33 s), nothing is wrong
    assert "precedence" not in _judged(_observation([*history, deleted(T0 + 33)], actions=actions))


def test_a_maintenance_drains_force_before_its_timeout_or_long_before_its_start_is_a_violation() -> None:
    # Given a scheduled maintenance of i-1 starting at 300 s, and no lifecycle action of it: a maintenance's drain
    # completes none, so its deadline is capped only by what the force needs before the start (force grace, looks)
    starts = T0 + 300
    instances = [InstanceHistory("i-1", "g", "eu-west-1a", NODE, T0, T0)]

    def judged(cordoned: float, deleted: float) -> set[str]:
        history = [
            _pod(T0, "web-1"),
            _node(cordoned, owner="chaos-a", cordoned=True),
            replace(_pod(deleted, "web-1", removed=True), source="api"),
        ]
        return _judged(
            _observation(history, actions=[], instances=instances, outcomes={}, maintenances={"i-1": starts})
        )

    # When its drain, cordoned 110 s before the start, forces its pod 100 s before it: 10 s into the drain's 20 s
    # (a hook's cap, two minutes before its global timeout, let that through)
    assert "precedence" in judged(starts - 110, starts - 100)
    # And when its drain, cordoned 15 s before the start, forces 12 s before it: the force's grace and looks end
    # 7 s before the start, so its deadline was 3 s ahead
    assert "precedence" in judged(starts - 15, starts - 12)
    # But forced once its drain's timeout was over, or at the cap the start puts on it, nothing is wrong
    assert "precedence" not in judged(starts - 110, starts - 89)
    assert "precedence" not in judged(starts - 15, starts - 8)


def test_the_steps_between_a_slots_grant_and_its_cordons_first_try_are_allowed_up_to_a_waiters_longest_ask() -> (
    None
):
    # Given a node granted its slot at 3 s and cordoned at 5 s, its action completed at 46 s: 41 s after the cordon,
    # where the product dates its drain (the pods are promised the whole timeout after it: see _forced_from), 43 s
    # after the grant (seed 311 scenario 2: the step confirmed the slot and read the node for 1.3 s before its
    # PATCH, and the slot was judged held 42.4 s against 42 s)
    granted = _budget_holding(T0 + 3, NODE)
    cordoned = [granted, _node(T0 + 5, owner="chaos-a", cordoned=True)]
    assert "slot-held" not in _judged(_observation(cordoned, actions=[_terminate(T0 + 46)]))
    # ...and one whose every PATCH was refused, the first at 5 s: the product's drain time runs from that try
    refused = [Firing(5, "f1", "kube-webhook-deny", f"PATCH nodes {NODE}")]
    never = _observation([granted], actions=[_terminate(T0 + 46)], firings=refused)
    assert "slot-held" not in _judged(never)
    # But not past a waiter's longest wait between two asks (4 x BudgetRetrySeconds: 8 s), which is the longest a
    # slot passed on to a waiter whose wake-up was lost stands before its step runs: cordoned 12 s after its
    # grant, completed 40 s after the cordon, the slot is held too long
    late = [granted, _node(T0 + 15, owner="chaos-a", cordoned=True)]
    assert "slot-held" in _judged(_observation(late, actions=[_terminate(T0 + 55)]))
    # nor is a first try with no grant before it, or an unrelated fault, counted
    other = [Firing(4, "f1", "kube-webhook-deny", "PATCH nodes other")]
    assert "slot-held" in _judged(_observation([granted], actions=[_terminate(T0 + 46)], firings=other))


def test_a_slot_left_in_the_budget_after_its_action_completed_is_held_until_it_leaves() -> None:
    # Given a node granted its slot at 2 s and cordoned at 3 s, its action completed at 20 s
    held = [_budget_holding(T0 + 2, NODE), _node(T0 + 3, owner="chaos-a", cordoned=True)]

    def judged(released: float, *firings: Firing) -> set[str]:
        history = [*held, _budget_holding(released)]
        return _judged(_observation(history, actions=[_terminate(T0 + 20)], firings=list(firings)))

    # When its holder entry leaves the budget's document only at 150 s (the product left it to the sweeper's look
    # at an expired holder): the slot stood idle 130 s past the drain's end, the other drains waiting for it
    # (invariant 10 counts what the budget says is held, not what the drain thinks it holds)
    assert "slot-held" in judged(T0 + 150)
    # But released by the drain's cleanup a second after the completion, nothing is wrong
    assert "slot-held" not in judged(T0 + 21)
    # ...nor when the cleanup's read of the node failed and its tries went on for their 10 s before it gave the
    # slot back (RELEASE_FAILING_FOR)
    failed = Firing(21, "f1", "kube-error", f"GET nodes {NODE}")
    assert "slot-held" not in judged(T0 + 50, failed)
    # and a completion Auto Scaling refused for a while keeps its slot rightly until it goes through
    refused = Firing(15, "t", "aws-throttle", "autoscaling.CompleteLifecycleAction i-1")
    assert "slot-held" not in _judged(
        _observation([*held, _budget_holding(T0 + 81)], actions=[_terminate(T0 + 80)], firings=[refused])
    )


def _as(entry: HistoryEntry, stack: str, function: str = "DrainFunction") -> HistoryEntry:
    """``entry`` as an API write requested by ``stack``'s function (the user its assumed role maps to)."""
    role = f"{stack}-{function}Role"
    return replace(
        entry, source="api", user=f"arn:aws:sts::123456789012:assumed-role/{role}/{stack}-{function}"
    )


def _entry(node: str, owner: str, renewed: float, instance: str = "i-1") -> dict[str, Any]:
    stamp = datetime.fromtimestamp(renewed, UTC).isoformat().replace("+00:00", "Z")
    return {"node": node, "owner": owner, "instanceId": instance, "renewedAt": stamp, "ttlSeconds": 200}


def _budget_of(at: float, holders: list[dict[str, Any]], waiters: list[dict[str, Any]] = []) -> HistoryEntry:  # noqa: B006
    obj = {"kind": "ConfigMap", "data": {BUDGET[2]: json.dumps({"holders": holders, "waiters": waiters})}}
    return HistoryEntry(0, at, "update", "configmaps", BUDGET[0], BUDGET[1], "api", False, obj)


STACKS_OF = {"chaos-a": "chaos-a", "chaos-b": "chaos-b"}


def test_a_write_of_one_stack_to_another_owners_node_is_a_violation_whoever_it_claims_for() -> None:
    # Given chaos-a's node (group g), cordoned at 2 s, its claim chaos-a's, by a request of chaos-b's drain function
    # (a wrong-owner message taken in: the write names no other owner, and the annotation judge sees none)
    cordon = _node(T0 + 2, owner="chaos-a", cordoned=True)
    assert "ownership" in _judged(_observation([_as(cordon, "chaos-b")], stacks=STACKS_OF))
    # ...and a pod on it evicted by chaos-b's
    evicted = replace(_pod(T0 + 3, "web-1"), verb="create", resource="pods/eviction")
    assert "ownership" in _judged(
        _observation([_pod(T0, "web-1"), _as(evicted, "chaos-b", "SweeperFunction")], stacks=STACKS_OF)
    )
    # But written by chaos-a's own functions, or by the sandbox, nothing is wrong
    assert "ownership" not in _judged(_observation([_as(cordon, "chaos-a")], stacks=STACKS_OF))
    assert "ownership" not in _judged(
        _observation([_pod(T0, "web-1"), _as(evicted, "chaos-a")], stacks=STACKS_OF)
    )


def test_a_budget_write_of_one_stack_that_frees_grants_or_renews_another_owners_entry_is_a_violation() -> (
    None
):
    # Given chaos-a's holder of i-1's node, renewed at 1 s (TTL 200 s), and chaos-a's waiter of another node
    held = _entry(NODE, "chaos-a", T0 + 1)
    waiting = _entry("n2", "chaos-a", T0 + 1, instance="i-2")
    before = _budget_of(T0 + 1, [held], [waiting])

    def judged(after: HistoryEntry) -> set[str]:
        return _judged(_observation([before, after], stacks=STACKS_OF))

    # When chaos-b's write drops the holder while it is live (rules.py: another owner's entry is removed only once it
    # has expired), grants chaos-a's waiter (it is never granted by another owner), or renews chaos-a's holder
    assert "ownership" in judged(_as(_budget_of(T0 + 5, [], [waiting]), "chaos-b"))
    assert "ownership" in judged(_as(_budget_of(T0 + 5, [held, waiting], []), "chaos-b"))
    assert "ownership" in judged(
        _as(_budget_of(T0 + 5, [_entry(NODE, "chaos-a", T0 + 5)], [waiting]), "chaos-b")
    )
    # But chaos-b's write that leaves them as they are, or removes the holder once it expired (201 s after its
    # renewal), and chaos-a's own release, are no violation
    assert "ownership" not in judged(
        _as(_budget_of(T0 + 5, [held, _entry("n3", "chaos-b", T0 + 5, instance="i-3")], [waiting]), "chaos-b")
    )
    assert "ownership" not in judged(_as(_budget_of(T0 + 202, [], [waiting]), "chaos-b"))
    assert "ownership" not in judged(_as(_budget_of(T0 + 5, [], [waiting]), "chaos-a"))
    # nor is a removal once the story was over (a replay or late sweep whose clock the world moved on hours)
    over = _observation([before, _as(_budget_of(T0 + 5, [], [waiting]), "chaos-b")], stacks=STACKS_OF)
    over.phases = [("launched", 1.0), ("seeded", 1.0), ("quiescent", 2.0), ("swept", 9.0)]
    assert "ownership" not in _judged(over)


def _web_budget(at: float, healthy: int) -> HistoryEntry:
    """The budget of s/web (app=web, 2 healthy required) as its controller wrote its status at ``at``."""
    obj = {
        "kind": "PodDisruptionBudget",
        "metadata": {"name": "web", "namespace": "s"},
        "spec": {"selector": {"matchLabels": {"app": "web"}}},
        "status": {"currentHealthy": healthy, "desiredHealthy": 2},
    }
    return HistoryEntry(0, at, "update", "poddisruptionbudgets", "s", "web", "sandbox", False, obj)


def test_a_budget_breached_by_pods_deleted_before_their_drains_timeout_is_a_violation() -> None:
    # Given s/web's two pods healthy on i-1's node, cordoned at 2 s by the terminate action started at 1 s (the
    # drain timeout is 20 s: the force policy may delete from 22 s)
    def deleted(at: float) -> HistoryEntry:
        pod = _pod(at, "web-1", removed=True)
        labelled = {**pod.object, "metadata": {**pod.object["metadata"], "labels": {"app": "web"}}}
        return replace(pod, source="api", object=labelled)

    before = [_web_budget(T0, 2), _pod(T0, "web-1"), _node(T0 + 2, owner="chaos-a", cordoned=True)]
    actions = [_terminate(T0 + 40)]
    # When a DELETE (no eviction, no budget asked) takes a pod at 5 s and the budget falls to 1 healthy of 2
    early = [*before, deleted(T0 + 5), _web_budget(T0 + 5.1, 1)]
    # Then the breach is the drain's (invariant: PodDisruptionBudgets respected)
    (breach,) = [v for v in check(_observation(early, actions=actions)) if v.invariant == "pdb"]
    assert "s/web: 1 healthy pods, 2 required" in breach.detail
    # But the force policy's delete past the drain's timeout excuses the breaches of the budgets selecting its pod
    forced = [*before, deleted(T0 + 25), _web_budget(T0 + 25.1, 1)]
    assert "pdb" not in _judged(_observation(forced, actions=actions))
    # and a breach before the story began (the workloads still starting) is no one's
    starting = [_web_budget(T0 - 5, 1), *before]
    assert "pdb" not in _judged(_observation(starting, actions=actions))


def _waiting(
    node: str, zone: str, owner: str, *, urgent: float | None, renewed: float = T0 + 3
) -> dict[str, Any]:
    entry = {**_entry(node, owner, renewed), "zone": zone}
    if urgent is not None:
        entry["urgentAt"] = datetime.fromtimestamp(urgent, UTC).isoformat().replace("+00:00", "Z")
    return entry


def test_a_grant_that_takes_the_room_of_another_stacks_waiter_near_its_global_deadline_is_a_violation() -> (
    None
):
    # Given chaos-a's node waiting in line at 3 s, near its action's global deadline since 2 s (its urgentAt),
    # beside chaos-b's holder of eu-west-1b (limits: 2 in all, 1 per zone)
    holder = {**_entry("h0", "chaos-b", T0 + 3, "i-h0"), "zone": "eu-west-1b"}
    newcomer = {**_entry("g", "chaos-b", T0 + 4, "i-g"), "zone": "eu-west-1c"}

    def judged(
        *, urgent: float | None, its: float | None = None, queued: bool = False, started: float = T0 + 3.5
    ) -> set[str]:
        waiting = [_waiting(NODE, "eu-west-1a", "chaos-a", urgent=urgent)]
        if queued:
            waiting.append(_waiting("g", "eu-west-1c", "chaos-b", urgent=its))
        before = _budget_of(T0 + 3, [holder], waiting)
        granted = _budget_of(T0 + 4, [holder, newcomer], waiting[:1])
        # (chaos-b's node's terminate action, begun at ``started``, in group g2)
        action = replace(_terminate(T0 + 30, started), instance_id="i-g", group="g2", token="tok-g")
        instance = InstanceHistory("i-g", "g2", "eu-west-1c", "g", T0, T0, started, T0 + 30, "scale-in")
        return _judged(
            _observation(
                [before, granted],
                actions=[_terminate(T0 + 30), action],
                instances=[*_observation([]).instances, instance],
                groups={"g": "chaos-a", "g2": "chaos-b"},
                outcomes={"tok": "drained", "tok-g": "drained"},
            )
        )

    # When chaos-b's node, not yet touched and near its own global deadline later (its action begun 2.5 s after
    # chaos-a's), is granted at 4 s the slot chaos-a's node fitted in, as a newcomer or from the line
    # Then invariant 9 is broken: a waiter near its global deadline goes first, whichever stack's it is
    assert "precedence" in judged(urgent=T0 + 2)
    assert "precedence" in judged(urgent=T0 + 2, its=None, queued=True)
    # (a newcomer whose action began as soon may go first: the stacks' records date their deadlines alike)
    assert "precedence" not in judged(urgent=T0 + 2, started=T0 + 1)
    # and so by a waiter near its deadline later than chaos-a's node (its urgentAt later)
    assert "precedence" in judged(urgent=T0 + 2, its=T0 + 2.5, queued=True)
    # But not by one near its deadline as soon or sooner, which goes first
    assert "precedence" not in judged(urgent=T0 + 2, its=T0 + 1.5, queued=True)
    # nor when chaos-a's node was not yet near its deadline when the document was read (the order of the line
    # decides), nor when it is not near it at all
    assert "precedence" not in judged(urgent=T0 + 3.5)
    assert "precedence" not in judged(urgent=None)


def test_a_waiter_near_its_global_deadline_by_less_than_the_clock_skew_is_not_yet_first_for_certain() -> None:
    # Given a scenario whose functions' clocks may be 2 s apart, and chaos-a's node waiting, near its global
    # deadline since 2 s by its urgentAt, while the document was read at 3 s
    skewed = replace(
        draw(1, 0, faults=False), faults=(Fault("f1", "clock-skew", "DrainFunction", 0.5, value=2),)
    )
    holder = {**_entry("h0", "chaos-b", T0 + 3, "i-h0"), "zone": "eu-west-1b"}
    newcomer = {**_entry("g", "chaos-b", T0 + 4, "i-g"), "zone": "eu-west-1c"}
    waiting = [_waiting(NODE, "eu-west-1a", "chaos-a", urgent=T0 + 2)]
    history = [_budget_of(T0 + 3, [holder], waiting), _budget_of(T0 + 4, [holder, newcomer], waiting)]

    # When chaos-b's node is granted at 4 s the slot it fitted in
    judged = _judged(_observation(history, actions=[_terminate(T0 + 30)], scenario=skewed))

    # Then nothing is wrong: the writer's clock may have read the time as 1 s, before the waiter's urgentAt
    assert "precedence" not in judged


def _claimed(
    name: str, at: float, *, token: str | None, cordoned: bool = True, removed: bool = False
) -> HistoryEntry:
    """Node ``name`` at ``at``: claimed by the lifecycle of ``token`` (its in-progress annotation names it, as the
    cordon's PATCH sets it) or by none (``token`` None), cordoned or not, or deleted."""
    progress = {"instance": "i-g", "transition": "terminate", "token": token}
    annotations = (
        {}
        if token is None
        else {"nodecycle.io/owner": "chaos-b", "nodecycle.io/in-progress": json.dumps(progress)}
    )
    obj: dict[str, Any] = {
        "kind": "Node",
        "metadata": {"name": name, "annotations": annotations},
        "spec": {"providerID": "aws:///eu-west-1c/i-g", "unschedulable": cordoned},
    }
    return HistoryEntry(0, at, "delete" if removed else "patch", "nodes", "", name, "api", removed, obj)


def _judged_with_g(history: list[HistoryEntry], *, started: float = T0 + 1.5) -> set[str]:
    """``history`` judged beside chaos-b's node ``g`` (instance i-g, group g2, zone eu-west-1c), whose terminate
    action (token tok-g) began at ``started``, and chaos-a's i-1 (token tok)."""
    action = replace(_terminate(T0 + 30, started), instance_id="i-g", group="g2", token="tok-g")
    instance = InstanceHistory("i-g", "g2", "eu-west-1c", "g", T0, T0, started, T0 + 30, "scale-in")
    return _judged(
        _observation(
            history,
            actions=[_terminate(T0 + 30), action],
            instances=[*_observation([]).instances, instance],
            groups={"g": "chaos-a", "g2": "chaos-b"},
            outcomes={"tok": "drained", "tok-g": "drained"},
        )
    )


def test_a_drain_in_progress_whose_node_was_uncordoned_or_deleted_goes_first_and_is_no_violation() -> None:
    # Given chaos-b's node g, cordoned by its drain (tok-g) at 2 s, that lost its slot; chaos-a's node waiting in
    # line since, near its global deadline since 2 s (its urgentAt), and cordoned by its own drain, in progress too
    # but in line after g; chaos-b's holder of eu-west-1b beside them (limits: 2 in all, 1 per zone)
    holder = {**_entry("h0", "chaos-b", T0 + 3, "i-h0"), "zone": "eu-west-1b"}
    g = {**_entry("g", "chaos-b", T0 + 3, "i-g"), "zone": "eu-west-1c", "inProgress": True}
    urgent = _waiting(NODE, "eu-west-1a", "chaos-a", urgent=T0 + 2)
    in_line = {**urgent, "inProgress": True}
    claimed = _claimed("g", T0 + 2, token="tok-g")

    # When g's node is uncordoned by someone else (kubectl uncordon: its annotations stay), or deleted (its object
    # gone, and registered again or not), and its drain asks again in progress (domain/drain/cordon.py: asked again
    # after its cordon, in_progress=True; evict.py's polls likewise) and is granted the slot at 4 s, from its place
    # in line or as a newcomer (its holder's expiry removed by another write before)
    for since in (
        replace(claimed, time=T0 + 2.5, object={**claimed.object, "spec": {"unschedulable": False}}),
        _claimed("g", T0 + 2.5, token="tok-g", removed=True),
        _claimed("g", T0 + 2.7, token=None, cordoned=False),
    ):
        for waiter in (urgent, in_line):
            history = [claimed, since]
            queued = [_budget_of(T0 + 3, [holder], [g, waiter]), _budget_of(T0 + 4, [holder, g], [waiter])]
            newcomer = [_budget_of(T0 + 3, [holder], [waiter]), _budget_of(T0 + 4, [holder, g], [waiter])]
            # Then nothing is wrong: a drain in progress goes first of all (rules.py, the replay's first class), by
            # what its request says, whatever its node shows now
            assert "precedence" not in _judged_with_g([*history, *queued])
            assert "precedence" not in _judged_with_g([*history, *newcomer])


def test_a_grant_to_a_node_cordoned_but_not_by_its_drain_or_over_an_uncordoned_drain_in_progress_is_judged() -> (
    None
):
    # Given chaos-a's drain in progress (its waiter's entry says so), in line at 3 s, chaos-b's holder of eu-west-1b
    # beside it (limits: 2 in all, 1 per zone)
    holder = {**_entry("h0", "chaos-b", T0 + 3, "i-h0"), "zone": "eu-west-1b"}
    waiter = {**_entry(NODE, "chaos-a", T0 + 3), "zone": "eu-west-1a", "inProgress": True}
    newcomer = {**_entry("g", "chaos-b", T0 + 4, "i-g"), "zone": "eu-west-1c"}
    grant = [_budget_of(T0 + 3, [holder], [waiter]), _budget_of(T0 + 4, [holder, newcomer], [waiter])]
    cordon = _node(T0 + 2, owner="chaos-a", cordoned=True)

    # When chaos-b's node g, cordoned by an operator (no lifecycle's claim) or left cordoned by a lifecycle over
    # (its annotation names tok-old, no action open), asks as a node not yet touched and is granted that slot
    # Then invariant 9 is broken: its node's cordon is no drain in progress, and its request said so
    assert "precedence" in _judged_with_g([cordon, _claimed("g", T0 + 2, token=None), *grant])
    assert "precedence" in _judged_with_g([cordon, _claimed("g", T0 + 2, token="tok-old"), *grant])
    # And when chaos-a's node was uncordoned under its drain (its request still in progress), a grant to a node not
    # yet touched that takes its room is one too
    uncordoned = _node(T0 + 2.5, owner="chaos-a", cordoned=False)
    assert "precedence" in _judged_with_g([cordon, uncordoned, *grant])
    # But a waiter whose node an operator cordoned, not in progress by its request, has no precedence: the order of
    # the line decides
    untouched = {**waiter, "inProgress": False}
    operator = _node(T0 + 2, cordoned=True)
    assert "precedence" not in _judged_with_g(
        [
            operator,
            _budget_of(T0 + 3, [holder], [untouched]),
            _budget_of(T0 + 4, [holder, newcomer], [untouched]),
        ]
    )


def test_a_drain_in_progress_granted_before_an_older_one_that_fitted_is_a_violation() -> None:
    # Given two drains in progress in line (both entries inProgress): chaos-a's node paused since 1 s, chaos-b's node
    # g since 3 s, beside chaos-b's holder of eu-west-1b (limits: 2 in all, 1 per zone)
    holder = {**_entry("h0", "chaos-b", T0 + 3, "i-h0"), "zone": "eu-west-1b"}

    def judged(older: float, younger: float) -> set[str]:
        stamp = datetime.fromtimestamp(older, UTC).isoformat().replace("+00:00", "Z")
        first = {
            **_entry(NODE, "chaos-a", T0 + 3),
            "zone": "eu-west-1a",
            "inProgress": True,
            "waitingSince": stamp,
        }
        stamp = datetime.fromtimestamp(younger, UTC).isoformat().replace("+00:00", "Z")
        g = {
            **_entry("g", "chaos-b", T0 + 3, "i-g"),
            "zone": "eu-west-1c",
            "inProgress": True,
            "waitingSince": stamp,
        }
        before = _budget_of(T0 + 3.5, [holder], [first, g])
        return _judged_with_g(
            [_claimed("g", T0 + 2, token="tok-g"), before, _budget_of(T0 + 4, [holder, g], [first])]
        )

    # When g, in line after it, is granted at 4 s the slot chaos-a's node fitted in
    # Then invariant 9 is broken: among drains in progress the oldest goes first (rules.py's replay, class 1)
    assert "precedence" in judged(T0 + 1, T0 + 3)
    # But not when g waits since as long or longer, which goes first
    assert "precedence" not in judged(T0 + 3, T0 + 1)


def test_a_grant_over_a_waiter_whose_cordon_landed_though_it_asked_as_untouched_is_a_violation() -> None:
    # Given chaos-a's node claimed by its open terminate lifecycle (tok) at 2 s, the cordon's PATCH, whose step's
    # commit was lost: asked again, its waiter's entry in line at 3 s does not say it is in progress; chaos-b's
    # holder of eu-west-1b beside it (limits: 2 in all, 1 per zone)
    holder = {**_entry("h0", "chaos-b", T0 + 3, "i-h0"), "zone": "eu-west-1b"}
    waiter = {**_entry(NODE, "chaos-a", T0 + 3), "zone": "eu-west-1a"}
    newcomer = {**_entry("g", "chaos-b", T0 + 4, "i-g"), "zone": "eu-west-1c"}
    grant = [_budget_of(T0 + 3, [holder], [waiter]), _budget_of(T0 + 4, [holder, newcomer], [waiter])]

    # When chaos-b's node g, not yet touched, is granted at 4 s the slot chaos-a's node fitted in
    # Then invariant 9 is broken: chaos-a's node is cordoned by its drain, a drain in progress, whatever it asked
    assert "precedence" in _judged_with_g([_claimed(NODE, T0 + 2, token="tok"), *grant])
    # But not when the claim is of a lifecycle over (tok-old: no action of it open), nor with no claim at all
    assert "precedence" not in _judged_with_g([_claimed(NODE, T0 + 2, token="tok-old"), *grant])
    assert "precedence" not in _judged_with_g([_node(T0 + 2, owner="chaos-a", cordoned=True), *grant])


def test_a_budget_configmap_created_again_seeded_with_another_owners_drain_breaks_no_ownership() -> None:
    # Given chaos-a's holder of i-1's node, renewed at 1 s (TTL 200 s), and chaos-a's waiter of another node; the
    # ConfigMap deleted at 3 s and created again empty (kubectl replace --force), by no stack
    held = _entry(NODE, "chaos-a", T0 + 1)
    waiting = _entry("n2", "chaos-a", T0 + 1, instance="i-2")
    before = _budget_of(T0 + 1, [held], [waiting])
    deleted = replace(before, time=T0 + 3, verb="delete", removed=True)
    empty = {"kind": "ConfigMap", "metadata": {"name": BUDGET[1], "namespace": BUDGET[0]}}
    created = HistoryEntry(0, T0 + 3.01, "create", "configmaps", BUDGET[0], BUDGET[1], "api", False, empty)

    claimed = _node(T0 + 0.5, owner="chaos-a", cordoned=True)  # (the drain's claim of the node, as it shows)

    def judged(after: HistoryEntry) -> set[str]:
        return _judged(_observation([claimed, before, deleted, created, after], stacks=STACKS_OF))

    # When chaos-b's first write to it seeds chaos-a's drain in progress as a holder (seed.py: every owner's, as its
    # node shows it), and leaves out the waiter the ConfigMap forgot
    seeded = {**_entry(NODE, "chaos-a", T0 + 4), "seeded": True}
    # Then nothing is wrong: the seed grants nothing, and the waiter went with the ConfigMap, not by chaos-b's write
    assert "ownership" not in judged(_as(_budget_of(T0 + 4, [seeded], []), "chaos-b"))
    # But that write adding chaos-a's node as a holder not seeded (a grant of another owner's) is one
    assert "ownership" in judged(_as(_budget_of(T0 + 4, [_entry(NODE, "chaos-a", T0 + 4)], []), "chaos-b"))


def test_a_seeded_holder_of_another_owner_whose_node_shows_no_claim_of_it_is_a_grant_by_the_writer() -> None:
    # Given the budget ConfigMap deleted at 3 s and created again empty; chaos-a's node never claimed, or its claim
    # by chaos-a's drain cleared a minute before (its cleanup)
    empty = {"kind": "ConfigMap", "metadata": {"name": BUDGET[1], "namespace": BUDGET[0]}}
    deleted = replace(_budget_of(T0 + 3, []), verb="delete", removed=True)
    created = HistoryEntry(0, T0 + 3.01, "create", "configmaps", BUDGET[0], BUDGET[1], "api", False, empty)
    seeded = _as(_budget_of(T0 + 4, [{**_entry(NODE, "chaos-a", T0 + 4), "seeded": True}], []), "chaos-b")

    def judged(*nodes: HistoryEntry) -> set[str]:
        # (i-1's terminate action from 0.5 s to 1.5 s: its claim cleared at its cleanup, after it)
        actions = [_terminate(T0 + 1.5, T0 + 0.5)]
        return _judged(_observation([*nodes, deleted, created, seeded], stacks=STACKS_OF, actions=actions))

    # When chaos-b's first write to it takes chaos-a's node for a holder marked seeded: the seed (domain/budget/seed.py)
    # takes only the drains in progress the nodes show (owner and in-progress annotations); a holder of a node that
    # shows none is a grant of another owner's slot, whatever the write marks it, as the judge of precedence reads the
    # node's claim rather than the request's word
    claimed = _node(T0 + 1, owner="chaos-a", cordoned=True)
    assert "ownership" in judged()  # (never claimed)
    assert "ownership" in judged(replace(claimed, time=T0 - 60), _node(T0 - 59, cordoned=True))
    # But not while the node shows chaos-a's claim, nor for a claim cleared between the seed's list and its write
    assert "ownership" not in judged(claimed)
    assert "ownership" not in judged(claimed, _node(T0 + 2, cordoned=True))
