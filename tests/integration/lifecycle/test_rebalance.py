"""A rebalance recommendation in each RebalancePolicy mode, end to end: three stacks on one cluster, each
managing a Spot group of its own with its own policy, each group's instance recommended for rebalancing."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest

from nodecycle.adapters.aws.records import DynamoRecordStore
from nodecycle.domain.ports.cluster import OWNER_ANNOTATION
from nodecycle_sandbox.aws.group import GroupSpec, default_hooks, wait_for
from nodecycle_sandbox.checks import last_pod_gone, pdb_breaches
from nodecycle_sandbox.kube import HistoryEntry
from tests.integration.lifecycle.harness import FAST, WORKLOADS, node_of, records, running

pytestmark = pytest.mark.slow


def spot_group(name: str) -> GroupSpec:
    return GroupSpec(name=name, size=1, hooks=default_hooks(heartbeat_timeout=300), on_demand_percentage=0)


def test_a_rebalance_recommendation_is_ignored_cordoned_or_drained_as_each_stack_says() -> None:
    # Given a stack that ignores rebalance recommendations (its Spot group of 2), one that cordons and one
    # that drains (a Spot group of 1 each), and workloads on every node
    with running(size=2, spot=True, workloads=None, parameters={"RebalancePolicy": "ignore"}) as sandbox:
        groups = {"ignore": sandbox.asg}
        store = {"ignore": records(sandbox)}
        for policy in ("cordon", "drain"):
            runner, group = sandbox.add_stack(
                f"rb-{policy}",
                parameters={**FAST, "OwnerId": f"rb-{policy}", "RebalancePolicy": policy},
                group=spot_group(f"rb-{policy}"),
            )
            assert group is not None
            groups[policy] = group
            store[policy] = DynamoRecordStore(
                runner.table("LifecycleTable").name,
                ttl=timedelta(days=1),
                dynamodb=sandbox.client("dynamodb"),
            )
        instances = {policy: group.wait_in_service(1, timeout=90)[0] for policy, group in groups.items()}
        sandbox.kube.seed(dict(WORKLOADS))
        sandbox.kube.settle(timeout=30)
        nodes = {policy: node_of(sandbox, instance) for policy, instance in instances.items()}
        before = _pods_on(sandbox, nodes["cordon"])
        assert all(_pods_on(sandbox, n) for n in nodes.values())
        sandbox.kube.reset_history()

        # When EC2 recommends rebalancing each group's instance (the cordoning stack's cordon in place before the
        # draining stack's recommendation: a pod that drain evicts must not be scheduled onto the node whose pods
        # this test counts before it is cordoned; the two stacks race otherwise, by a fraction of a second)
        for policy, group in groups.items():
            group.recommend_rebalance(instances[policy])
            if policy == "cordon":
                wait_for(lambda: _cordoned(sandbox, nodes["cordon"]), 30, "the cordon")

        # Then the draining stack drains its node under the budget, the cordoning one cordons its node
        wait_for(lambda: last_pod_gone(sandbox.kube.history(), nodes["drain"]), 60, "the drain")
        wait_for(lambda: _cordoned(sandbox, nodes["cordon"]), 30, "the cordon")
        ids = {policy: f"{instances[policy]}/rebalance" for policy in groups}
        wait_for(
            lambda: all((r := store[p].get(ids[p])) and r.finished for p in ("cordon", "drain")),
            30,
            "records",
        )
        history = sandbox.kube.history()
        ignored = sandbox.kube.get_object("nodes", nodes["ignore"])
        drained = sandbox.kube.get_object("nodes", nodes["drain"])
        cordoned = sandbox.kube.get_object("nodes", nodes["cordon"])
        instance_states = {policy: group.instances()[instances[policy]] for policy, group in groups.items()}
        ignore_record = store["ignore"].get(ids["ignore"])
        after = _pods_on(sandbox, nodes["cordon"])

    # ignore: the node untouched (never cordoned, never annotated, nothing evicted), no record
    assert ignore_record is None
    assert ignored is not None
    assert not (ignored.get("spec") or {}).get("unschedulable")
    assert OWNER_ANNOTATION not in (ignored["metadata"].get("annotations") or {})
    assert _evictions(history, nodes["ignore"]) == 0
    # cordon: cordoned (and stays so: no new pods), no pod evicted
    assert cordoned is not None
    assert (cordoned.get("spec") or {}).get("unschedulable") is True
    assert _evictions(history, nodes["cordon"]) == 0
    assert after == before
    # drain: its pods evicted under the budget: a holder entry (not forced) while it drained
    assert drained is not None
    assert _evictions(history, nodes["drain"]) > 0
    holders = [
        h
        for e in history
        if e.kind == "ConfigMap" and e.name == "nodecycle-budget"
        for h in json.loads((e.object.get("data") or {}).get("budget.json") or "{}").get("holders", [])
        if h["node"] == nodes["drain"]
    ]
    assert holders
    assert {h.get("forced", False) for h in holders} == {False}
    assert pdb_breaches(history) == []
    # nothing terminated any instance: a recommendation is not an interruption
    assert set(instance_states.values()) == {"InService"}


def _cordoned(sandbox: object, node: str) -> bool:
    found = sandbox.kube.get_object("nodes", node)  # type: ignore[attr-defined]
    return bool(found and (found.get("spec") or {}).get("unschedulable"))


def _pods_on(sandbox: object, node: str) -> set[str]:
    pods = sandbox.kube.objects("pods")  # type: ignore[attr-defined]
    return {p["metadata"]["name"] for p in pods if _on_node(p, node)}


def _on_node(pod: dict[str, object], node: str) -> bool:
    spec = pod.get("spec") or {}
    return isinstance(spec, dict) and spec.get("nodeName") == node


def _evictions(history: list[HistoryEntry], node: str) -> int:
    return sum(
        1
        for e in history
        if e.resource == "pods/eviction" and e.verb == "create" and _on_node(e.object, node)
    )
