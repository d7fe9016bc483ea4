"""The pods/eviction subresource under PodDisruptionBudgets, as kube-apiserver answers it."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from nodecycle_sandbox.kube import KubeServer, eviction

from .conftest import Kube, is_ready, nodes_seed, pods_of, status_of, wait_until

VIOLATION = "Cannot evict pod as it would violate the pod's disruption budget."


def _seed_web(
    server: KubeServer,
    *,
    replicas: int,
    pdb: dict[str, Any] | None,
    slow_replacements: bool = False,
    **pod: Any,
) -> list[str]:
    """``web`` in namespace shop, one pod per node, settled; returns the pod names. With
    ``slow_replacements`` the pods created from now on take a minute to become Ready."""
    deployment = {"name": "web", "namespace": "shop", "replicas": replicas, **pod}
    if pdb is not None:
        deployment["pdb"] = pdb
    server.seed({"nodes": nodes_seed(replicas), "deployments": [deployment]})
    server.settle()
    if slow_replacements:
        server.pod_start_seconds = 60
    return sorted(p["metadata"]["name"] for p in pods_of(server, "shop", "web"))


def _eviction(name: str, api_version: str = "policy/v1", **extra: Any) -> dict[str, Any]:
    return {
        "apiVersion": api_version,
        "kind": "Eviction",
        "metadata": {"name": name, "namespace": "shop"},
        **extra,
    }


def _evict(kube: Kube, name: str, **extra: Any) -> int:
    """The status of an eviction as client-go reads it: 201, or the error's; or the code of a Failure Status a 2xx
    answer carries (a pod two budgets select: 500, answered 201)."""
    try:
        answer = kube.core.create_namespaced_pod_eviction(
            name, "shop", _eviction(name, **extra), _preload_content=False
        )
    except ApiException as error:
        return int(error.status)
    status = json.loads(answer.data)
    return int(status["code"]) if status.get("status") == "Failure" else int(answer.status)


def test_allowed_eviction_is_201_and_the_pod_terminates_and_is_replaced(
    server: KubeServer, kube: Kube
) -> None:
    pods = _seed_web(server, replicas=3, pdb={"maxUnavailable": 1})
    assert _evict(kube, pods[0]) == 201
    assert server.counters()[("create", "pods/eviction")] == 1
    wait_until(
        lambda: pods[0] not in {p["metadata"]["name"] for p in pods_of(server, "shop", "web")},
        what="pod gone",
    )
    wait_until(
        lambda: sum(is_ready(p) for p in pods_of(server, "shop", "web")) == 3, what="a Ready replacement"
    )


def test_eviction_that_would_violate_the_budget_is_429_with_the_message_kubectl_expects(
    server: KubeServer, kube: Kube
) -> None:
    # Given 3 pods under minAvailable 2, replacements slow to start
    pods = _seed_web(server, replicas=3, pdb={"minAvailable": 2}, slow_replacements=True)
    # When two pods are evicted in a row, the second once the disruption controller has counted the first gone
    # (until then the budget's status, which the eviction reads, counts 3 healthy pods and no disruption left)
    assert _evict(kube, pods[0]) == 201
    wait_until(
        lambda: (
            (server.get_object("poddisruptionbudgets", "web", "shop") or {})["status"]["currentHealthy"] == 2
        ),
        what="the budget to count 2 healthy",
    )
    with pytest.raises(ApiException) as raised:
        kube.core.create_namespaced_pod_eviction(pods[1], "shop", _eviction(pods[1]))
    # Then the second is refused with a TooManyRequests Status naming the budget
    assert raised.value.status == 429
    assert status_of(raised.value) == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": VIOLATION,
        "reason": "TooManyRequests",
        "details": {
            "causes": [
                {
                    "reason": "DisruptionBudget",
                    "message": "The disruption budget web needs 2 healthy pods and has 2 currently",
                }
            ]
        },
        "code": 429,
    }
    assert server.get_object("pods", pods[1], "shop") is not None


@pytest.mark.parametrize(
    ("pdb", "allowed"),
    [
        ({"minAvailable": 3}, 1),
        ({"minAvailable": 0}, 4),
        ({"minAvailable": "50%"}, 2),
        ({"minAvailable": "60%"}, 1),  # ceil(2.4) = 3 must stay
        ({"maxUnavailable": 0}, 0),
        ({"maxUnavailable": "25%"}, 1),
        ({"maxUnavailable": "30%"}, 2),  # ceil(1.2) = 2 may go
    ],
)
def test_budget_as_count_or_percent_allows_exactly_its_disruptions(
    server: KubeServer, kube: Kube, pdb: dict[str, Any], allowed: int
) -> None:
    pods = _seed_web(server, replicas=4, pdb=pdb, slow_replacements=True)
    statuses = [_evict(kube, name) for name in pods]
    assert statuses.count(201) == allowed
    assert statuses.count(429) == 4 - allowed


def test_pod_matched_by_two_budgets_is_not_evicted_its_refusal_a_status_of_500_answered_201(
    server: KubeServer, kube: Kube
) -> None:
    pods = _seed_web(server, replicas=2, pdb={"maxUnavailable": 1})
    second = {
        "metadata": {"name": "web-too"},
        "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"app": "web"}}},
    }
    kube.policy.create_namespaced_pod_disruption_budget("shop", second)
    answer = kube.core.create_namespaced_pod_eviction(
        pods[0], "shop", _eviction(pods[0]), _preload_content=False
    )
    # The Status evictionREST returns as its result, not as an error (code 500, no reason, its own words): the
    # create handler writes it with 201 Created, as any result (kube-apiserver's handlers/create.go)
    assert answer.status == 201
    assert json.loads(answer.data) == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support.",
        "code": 500,
    }
    # And the pod is not evicted
    pod = server.get_object("pods", pods[0], "shop")
    assert pod is not None
    assert not pod["metadata"].get("deletionTimestamp")


def test_eviction_of_a_missing_pod_is_404(server: KubeServer, kube: Kube) -> None:
    _seed_web(server, replicas=1, pdb=None)
    assert _evict(kube, "web-gone") == 404


def test_evicting_a_pod_that_is_already_terminating_succeeds_with_an_exhausted_budget(
    server: KubeServer, kube: Kube
) -> None:
    pods = _seed_web(
        server, replicas=3, pdb={"maxUnavailable": 1}, shutdownSeconds=30, slow_replacements=True
    )
    assert _evict(kube, pods[0]) == 201
    assert _evict(kube, pods[1]) == 429
    assert _evict(kube, pods[0]) == 201  # a drain retrying the pod it already evicted is not blocked


def test_eviction_honours_delete_options_grace_period(server: KubeServer, kube: Kube) -> None:
    pods = _seed_web(server, replicas=2, pdb={"maxUnavailable": 1}, shutdownSeconds=30)
    assert _evict(kube, pods[0], deleteOptions={"gracePeriodSeconds": 0}) == 201
    assert server.get_object("pods", pods[0], "shop") is None


def test_policy_v1beta1_eviction_body_is_accepted(server: KubeServer, kube: Kube) -> None:
    pods = _seed_web(server, replicas=2, pdb={"maxUnavailable": 1})
    assert _evict(kube, pods[0], api_version="policy/v1beta1") == 201


def test_eviction_whose_body_names_another_pod_is_400(server: KubeServer, kube: Kube) -> None:
    pods = _seed_web(server, replicas=2, pdb=None)
    with pytest.raises(ApiException) as raised:
        kube.core.create_namespaced_pod_eviction(pods[0], "shop", _eviction(pods[1]))
    assert (raised.value.status, status_of(raised.value)["reason"]) == (400, "BadRequest")


def test_budget_status_reports_what_the_disruption_controller_would(server: KubeServer, kube: Kube) -> None:
    _seed_web(server, replicas=4, pdb={"minAvailable": "50%"})
    status = kube.policy.read_namespaced_pod_disruption_budget("web", "shop").status
    assert (
        status.expected_pods,
        status.desired_healthy,
        status.current_healthy,
        status.disruptions_allowed,
    ) == (
        4,
        2,
        4,
        2,
    )
    assert [(c.type, c.status) for c in status.conditions] == [("DisruptionAllowed", "True")]


def test_pods_of_a_not_ready_node_count_unhealthy_and_may_be_evicted_while_the_budget_holds(
    server: KubeServer, kube: Kube
) -> None:
    # Given 3 pods on 3 nodes under minAvailable 2
    pods = _seed_web(server, replicas=3, pdb={"minAvailable": 2}, slow_replacements=True)
    sick = next(p for p in pods_of(server, "shop", "web") if p["metadata"]["name"] == pods[0])
    # When the node of one pod stops reporting Ready
    server.set_node_ready(sick["spec"]["nodeName"], False)
    wait_until(
        lambda: not is_ready(server.get_object("pods", pods[0], "shop") or {}), what="the pod to turn unready"
    )
    # Then a healthy pod may not go (only 2 healthy are left) but the unhealthy one may
    assert _evict(kube, pods[1]) == 429
    assert _evict(kube, pods[0]) == 201


def test_a_stale_uid_precondition_meets_the_budget_first(server: KubeServer, kube: Kube) -> None:
    # Given a budget with no disruption left
    pods = _seed_web(server, replicas=2, pdb={"maxUnavailable": 0})
    # When a pod is evicted with a uid precondition that no longer matches
    stale = {"preconditions": {"uid": "0b1c0d2e-0000-4000-8000-000000000000"}}
    # Then the budget answers first (429): kube-apiserver checks the preconditions only when it deletes
    assert _evict(kube, pods[0], deleteOptions=stale) == 429


def test_a_stale_uid_precondition_the_budget_lets_through_is_409_and_counts_as_a_disruption(
    server: KubeServer, kube: Kube, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a budget with one disruption allowed
    pods = _seed_web(server, replicas=3, pdb={"maxUnavailable": 1})
    stale = {"preconditions": {"uid": "0b1c0d2e-0000-4000-8000-000000000000"}}
    # When a pod is evicted with a uid precondition that no longer matches
    # Then the delete is refused (409) and the pod stays, but the budget has recorded the disruption it allowed
    # (status.disruptedPods) and counts it until the pod is deleted or the DeletionTimeout (2 min) has passed
    assert _evict(kube, pods[0], deleteOptions=stale) == 409
    assert server.get_object("pods", pods[0], "shop") is not None
    assert _evict(kube, pods[1]) == 429
    pdb = server.get_object("poddisruptionbudgets", "web", "shop")
    assert pdb is not None
    assert list(pdb["status"]["disruptedPods"]) == [pods[0]]
    # When the DeletionTimeout has passed, Then the pod that was not deleted counts as healthy again, from the
    # disruption controller's next pass (the eviction reads the budget's status, which that pass writes)
    monkeypatch.setattr(eviction, "DELETION_TIMEOUT_SECONDS", 0.0)
    wait_until(lambda: _evict(kube, pods[1]) == 201, what="the eviction allowed")


def test_a_stale_uid_precondition_of_a_pod_being_deleted_is_409_after_the_handler_s_retries(
    server: KubeServer, kube: Kube, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a pod already terminating (its eviction skips the budget), and the eviction handler's retry of a
    # conflict shortened for the test (EvictionsRetry: 20 tries 0.5 s apart, about 10 s on kube-apiserver)
    pods = _seed_web(server, replicas=2, pdb={"maxUnavailable": 1}, shutdownSeconds=30)
    assert _evict(kube, pods[0]) == 201
    monkeypatch.setattr(eviction, "CONFLICT_RETRY_SECONDS", 0.05)
    # When it is evicted again with a uid that no longer matches, Then the delete refuses it: 409, but only once
    # the handler has tried it 20 times (retry.OnError on a conflict, the request naming no resourceVersion)
    stale = {"preconditions": {"uid": "0b1c0d2e-0000-4000-8000-000000000000"}}
    started = time.monotonic()
    assert _evict(kube, pods[0], deleteOptions=stale) == 409
    assert time.monotonic() - started >= 19 * 0.05
    # and at once when the request names a resourceVersion too (no retry: its precondition is the caller's)
    current = kube.core.read_namespaced_pod(pods[0], "shop").metadata.resource_version
    started = time.monotonic()
    both = {"preconditions": {"uid": stale["preconditions"]["uid"], "resourceVersion": current}}
    assert _evict(kube, pods[0], deleteOptions=both) == 409
    assert time.monotonic() - started < 19 * 0.05


@pytest.mark.parametrize(("policy", "evicted"), [(None, 429), ("IfHealthyBudget", 429), ("AlwaysAllow", 201)])
def test_a_lost_kubelet_makes_its_pods_unhealthy_and_their_eviction_follows_the_unhealthy_pod_policy(
    server: KubeServer, kube: Kube, policy: str | None, evicted: int
) -> None:
    # Given 3 pods on 3 nodes under minAvailable 3, with the given unhealthyPodEvictionPolicy
    pods = _seed_web(server, replicas=3, pdb={"minAvailable": 3})
    if policy is not None:
        kube.policy.patch_namespaced_pod_disruption_budget(
            "web", "shop", {"spec": {"unhealthyPodEvictionPolicy": policy}}
        )
    lost = next(p for p in pods_of(server, "shop", "web") if p["metadata"]["name"] == pods[0])
    # When the kubelet of one pod's node is lost and the node lifecycle controller marks the node Unknown
    server.kill_kubelet(lost["spec"]["nodeName"], grace_seconds=0)
    wait_until(
        lambda: not is_ready(server.get_object("pods", pods[0], "shop") or {}), what="the pod to turn unready"
    )
    # Then the pod's Ready condition is False (MarkPodsNotReady), the budget counts it unhealthy and allows
    # nothing, and its eviction is refused unless the policy lets unhealthy pods go whatever the budget
    status = (server.get_object("pods", pods[0], "shop") or {})["status"]
    conditions = {c["type"]: c["status"] for c in status["conditions"]}
    assert conditions["Ready"] == "False"
    # (only the Ready condition: the controller knows nothing of the containers, and says nothing of them)
    assert conditions["ContainersReady"] == "True"
    assert all(c["ready"] for c in status["containerStatuses"])
    wait_until(
        lambda: (
            (server.get_object("poddisruptionbudgets", "web", "shop") or {})["status"]["currentHealthy"] == 2
        ),
        what="the budget to count 2 healthy",
    )
    status = (server.get_object("poddisruptionbudgets", "web", "shop") or {})["status"]
    assert (status["desiredHealthy"], status["disruptionsAllowed"]) == (3, 0)
    assert _evict(kube, pods[1]) == 429
    assert _evict(kube, pods[0]) == evicted


def test_an_evicted_pod_is_marked_a_disruption_target_before_its_deletion(
    server: KubeServer, kube: Kube
) -> None:
    # Given pods that take a while to stop, under a budget with room
    pods = _seed_web(server, replicas=2, pdb={"maxUnavailable": 1}, shutdownSeconds=30)
    server.reset_history()

    # When one is evicted
    assert _evict(kube, pods[0]) == 201

    # Then, as kube-apiserver does (PodDisruptionConditions, GA in 1.31), its status first gets the condition
    # DisruptionTarget, in a write of its own, and only then is it deleted
    writes = [(e.verb, e.resource) for e in server.history() if e.kind == "Pod" and e.name == pods[0]]
    assert writes == [("update", "pods/status"), ("create", "pods/eviction")]
    evicted = kube.core.read_namespaced_pod(pods[0], "shop")
    assert evicted.metadata.deletion_timestamp is not None
    (target,) = [c for c in evicted.status.conditions if c.type == "DisruptionTarget"]
    assert (target.status, target.reason, target.message) == (
        "True",
        "EvictionByEvictionAPI",
        "Eviction API: evicting",
    )


def test_a_budget_its_controller_has_not_observed_yet_refuses_evictions_429_retry_after_10(
    server: KubeServer, kube: Kube
) -> None:
    # Given a budget with room whose spec was just changed, before the disruption controller's next pass
    pods = _seed_web(server, replicas=3, pdb={"maxUnavailable": 1})
    with server.paused_controllers():
        kube.policy.patch_namespaced_pod_disruption_budget("web", "shop", {"spec": {"maxUnavailable": 2}})

        # When a pod is evicted
        with pytest.raises(ApiException) as refused:
            kube.core.create_namespaced_pod_eviction(pods[0], "shop", _eviction(pods[0]))

    # Then it is refused as kube-apiserver refuses it (checkAndDecrement: status.observedGeneration behind
    # metadata.generation), 429 with Retry-After 10, and the pod stays
    assert refused.value.status == 429
    assert (refused.value.headers or {}).get("Retry-After") == "10"
    body = status_of(refused.value)
    assert body["details"]["retryAfterSeconds"] == 10
    assert body["details"]["causes"] == [
        {
            "reason": "DisruptionBudget",
            "message": "The disruption budget web is still being processed by the server.",
        }
    ]
    assert kube.core.read_namespaced_pod(pods[0], "shop").metadata.deletion_timestamp is None
    # and once the controller has observed it, the eviction is allowed
    wait_until(lambda: _evict(kube, pods[0]) == 201, what="the eviction allowed")


def test_an_eviction_is_judged_on_the_budget_status_its_controller_last_wrote(
    server: KubeServer, kube: Kube
) -> None:
    # Given 3 Ready pods under minAvailable 2, and a budget status the disruption controller wrote before it saw the
    # third pod Ready (its next pass not come yet): no disruption allowed
    pods = _seed_web(server, replicas=3, pdb={"minAvailable": 2})
    with server.paused_controllers():
        kube.policy.patch_namespaced_pod_disruption_budget_status(
            "web", "shop", {"status": {"currentHealthy": 2, "desiredHealthy": 2, "disruptionsAllowed": 0}}
        )

        # When a pod is evicted
        with pytest.raises(ApiException) as refused:
            kube.core.create_namespaced_pod_eviction(pods[0], "shop", _eviction(pods[0]))

    # Then it is refused on that status, as kube-apiserver's checkAndDecrement refuses it (it reads
    # status.disruptionsAllowed, never counts the pods itself), in the status's words, and the pod stays
    assert refused.value.status == 429
    assert status_of(refused.value)["details"]["causes"] == [
        {
            "reason": "DisruptionBudget",
            "message": "The disruption budget web needs 2 healthy pods and has 2 currently",
        }
    ]
    assert kube.core.read_namespaced_pod(pods[0], "shop").metadata.deletion_timestamp is None
    # and once the controller has counted the pods again, the eviction is allowed
    wait_until(lambda: _evict(kube, pods[0]) == 201, what="the eviction allowed")


def test_an_eviction_the_budget_status_allows_goes_through_and_takes_it_to_zero(
    server: KubeServer, kube: Kube
) -> None:
    # Given a budget whose status, written before a pod turned unready, still allows one disruption
    pods = _seed_web(server, replicas=3, pdb={"minAvailable": 3}, slow_replacements=True)
    with server.paused_controllers():
        kube.policy.patch_namespaced_pod_disruption_budget_status(
            "web", "shop", {"status": {"currentHealthy": 4, "desiredHealthy": 3, "disruptionsAllowed": 1}}
        )
        # When two pods are evicted before the controller's next pass
        statuses = [_evict(kube, pods[0]), _evict(kube, pods[1])]
        status = (server.get_object("poddisruptionbudgets", "web", "shop") or {})["status"]

    # Then the first goes (the status allowed it), the second is refused: the eviction took the status to zero
    assert statuses == [201, 429]
    assert status["disruptionsAllowed"] == 0
    assert set(status["disruptedPods"]) == {pods[0]}
    assert {c["type"]: c["status"] for c in status.get("conditions") or []}.get(
        "DisruptionAllowed"
    ) == "False"


def test_a_budget_with_an_empty_selector_guards_the_evictions_of_every_pod_of_its_namespace(
    server: KubeServer, kube: Kube
) -> None:
    # Given pods whose only budget has an empty selector ({}: in policy/v1, every pod of its namespace) and no room
    pods = _seed_web(server, replicas=2, pdb=None)
    kube.policy.create_namespaced_pod_disruption_budget(
        "shop", {"metadata": {"name": "all"}, "spec": {"minAvailable": 2, "selector": {}}}
    )
    wait_until(
        lambda: "status" in (server.get_object("poddisruptionbudgets", "all", "shop") or {}),
        what="the budget observed",
    )

    # When a pod is evicted, Then the budget refuses it (429, in its words), as kube-apiserver has since 1.29
    # (kubernetes#119732: getPodDisruptionBudgets no longer skips an empty selector; the API documents that an
    # empty selector selects every pod of the namespace, a null one none), and the pod stays
    with pytest.raises(ApiException) as refused:
        kube.core.create_namespaced_pod_eviction(pods[0], "shop", _eviction(pods[0]))
    assert refused.value.status == 429
    assert status_of(refused.value)["details"]["causes"] == [
        {
            "reason": "DisruptionBudget",
            "message": "The disruption budget all needs 2 healthy pods and has 2 currently",
        }
    ]
    assert kube.core.read_namespaced_pod(pods[0], "shop").metadata.deletion_timestamp is None


def test_a_pod_with_a_budget_of_its_own_under_a_namespace_wide_budget_too_cannot_be_evicted_500(
    server: KubeServer, kube: Kube
) -> None:
    # Given an app with its own budget, with room, and a budget of the whole namespace ({}) beside it
    pods = _seed_web(server, replicas=2, pdb={"maxUnavailable": 1})
    kube.policy.create_namespaced_pod_disruption_budget(
        "shop", {"metadata": {"name": "all"}, "spec": {"maxUnavailable": 1, "selector": {}}}
    )
    # When one of its pods is evicted, Then two budgets select it: 500, and it stays
    assert _evict(kube, pods[0]) == 500
    assert kube.core.read_namespaced_pod(pods[0], "shop").metadata.deletion_timestamp is None


def _pod_of_a_job(server: KubeServer, kube: Kube, name: str, node: str) -> None:
    """A pod of the Job ``batch`` (a controller without a scale subresource), bound to ``node``, labelled
    app=batch."""
    owner = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "name": "batch",
        "uid": "5e1f0c2a-0000-4000-8000-00000000b47c",
    }
    kube.core.create_namespaced_pod(
        "shop",
        {
            "metadata": {
                "name": name,
                "labels": {"app": "batch"},
                "ownerReferences": [{**owner, "controller": True}],
            },
            "spec": {"nodeName": node, "containers": [{"name": "main", "image": "busybox"}]},
        },
    )


def test_a_budget_whose_pods_controller_has_no_scale_is_never_observed_and_refuses_evictions_as_still_processed(
    server: KubeServer, kube: Kube
) -> None:
    # Given two running pods of a Job (no scale subresource) and a budget by maxUnavailable over them
    _seed_web(server, replicas=2, pdb=None)
    nodes = sorted(n["metadata"]["name"] for n in server.objects("nodes"))
    for index, node in enumerate(nodes[:2]):
        _pod_of_a_job(server, kube, f"batch-{index}", node)
    server.settle()
    kube.policy.create_namespaced_pod_disruption_budget(
        "shop",
        {
            "metadata": {"name": "batch"},
            "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"app": "batch"}}},
        },
    )

    # When the disruption controller syncs it, Then it fails (its expected count needs each pod's controller's
    # scale) and writes what failSafe writes: no disruption allowed, DisruptionAllowed False for SyncFailed in the
    # error's words, and not observedGeneration, which only a sync that succeeds advances
    pdb = wait_until(
        lambda: (
            (found := server.get_object("poddisruptionbudgets", "batch", "shop"))
            and found.get("status")
            and found
        ),
        what="the budget's status",
    )
    status = pdb["status"]
    assert "observedGeneration" not in status
    assert status["disruptionsAllowed"] == 0
    (condition,) = status["conditions"]
    assert (condition["type"], condition["status"], condition["reason"]) == (
        "DisruptionAllowed",
        "False",
        "SyncFailed",
    )
    assert "batch/v1" in condition["message"], condition
    # and every eviction of its pods is refused as one of a budget still being processed (checkAndDecrement:
    # observedGeneration behind generation), 429 with Retry-After 10, for as long as that lasts
    with pytest.raises(ApiException) as refused:
        kube.core.create_namespaced_pod_eviction("batch-0", "shop", _eviction("batch-0"))
    assert refused.value.status == 429
    assert (refused.value.headers or {}).get("Retry-After") == "10"
    assert status_of(refused.value)["details"]["causes"] == [
        {
            "reason": "DisruptionBudget",
            "message": "The disruption budget batch is still being processed by the server.",
        }
    ]


def test_pods_of_a_budget_without_a_controller_are_left_out_of_its_expected_count(
    server: KubeServer, kube: Kube
) -> None:
    # Given 3 web pods of a Deployment and a pod of no controller with web's labels, under maxUnavailable 1
    pods = _seed_web(server, replicas=3, pdb={"maxUnavailable": 1})
    node = server.get_object("pods", pods[0], "shop")["spec"]["nodeName"]  # type: ignore[index]
    kube.core.create_namespaced_pod(
        "shop",
        {
            "metadata": {"name": "web-by-hand", "labels": {"app": "web"}},
            "spec": {"nodeName": node, "containers": [{"name": "main", "image": "busybox"}]},
        },
    )
    server.settle()

    # Then the disruption controller counts the Deployment's scale (3) as expected, not the bare pod (unmanaged
    # pods: an Event, no failure, since 1.26's getExpectedScale), and the 4 healthy pods leave 2 disruptions
    def counted() -> tuple[int, int, int, int] | None:
        status = (server.get_object("poddisruptionbudgets", "web", "shop") or {}).get("status") or {}
        found = (
            status.get("expectedPods"),
            status.get("desiredHealthy"),
            status.get("currentHealthy"),
            status.get("disruptionsAllowed"),
        )
        return found if found[2] == 4 else None  # type: ignore[return-value]

    assert wait_until(counted, what="the budget counting 4 healthy pods") == (3, 2, 4, 2)


def test_a_stale_uid_precondition_of_an_unhealthy_pod_the_budget_lets_go_is_429_still_being_processed(
    server: KubeServer, kube: Kube
) -> None:
    # Given 3 pods on 3 nodes under minAvailable 2, one of them unready (its node NotReady): the budget holds
    # (3 >= 2), so an unhealthy pod may go without taking a disruption (IfHealthyBudget)
    pods = _seed_web(server, replicas=3, pdb={"minAvailable": 2}, slow_replacements=True)
    sick = next(p for p in pods_of(server, "shop", "web") if p["metadata"]["name"] == pods[0])
    server.set_node_ready(sick["spec"]["nodeName"], False)
    wait_until(
        lambda: not is_ready(server.get_object("pods", pods[0], "shop") or {}), what="the pod to turn unready"
    )
    stale = {"preconditions": {"uid": "0b1c0d2e-0000-4000-8000-000000000000"}}

    # When it is evicted with a uid precondition that no longer matches
    with pytest.raises(ApiException) as refused:
        kube.core.create_namespaced_pod_eviction(pods[0], "shop", _eviction(pods[0], deleteOptions=stale))

    # Then, as kube-apiserver answers a conflict of the delete it made conditional on the pod's resourceVersion
    # (updateDeletionOptions: "the pod hasn't been considered healthy since we calculated") and the request named
    # none: 429 'still being processed', Retry-After 10, not the delete's 409; and the pod stays
    assert refused.value.status == 429
    assert (refused.value.headers or {}).get("Retry-After") == "10"
    assert status_of(refused.value)["details"]["causes"] == [
        {
            "reason": "DisruptionBudget",
            "message": "The disruption budget web is still being processed by the server.",
        }
    ]
    assert kube.core.read_namespaced_pod(pods[0], "shop").metadata.deletion_timestamp is None
    # and naming a resourceVersion of its own too, the conflict is the 409 it asked for
    current = kube.core.read_namespaced_pod(pods[0], "shop").metadata.resource_version
    both = {"preconditions": {**stale["preconditions"], "resourceVersion": current}}
    assert _evict(kube, pods[0], deleteOptions=both) == 409


def test_an_eviction_whose_budget_status_writes_keep_conflicting_is_the_budgets_409_after_the_handler_s_tries(
    server: KubeServer, kube: Kube
) -> None:
    # Given a budget with room whose status other writers keep updating (many evictions at once under it)
    pods = _seed_web(server, replicas=3, pdb={"maxUnavailable": 1})
    server.contend_budget("shop", "web")

    # When a pod is evicted
    started = time.monotonic()
    with pytest.raises(ApiException) as conflicted:
        kube.core.create_namespaced_pod_eviction(pods[0], "shop", _eviction(pods[0]))
    took = time.monotonic() - started

    # Then it is answered as kube-apiserver answers it once its 20 tries, 500 ms apart, all met a conflict: the status
    # write's last conflict, which retry.RetryOnConflict returns rather than the ErrWaitTimeout the handler would turn
    # into a 504 (eviction.go: EvictionsRetry; client-go util/retry OnError): 409 Conflict on the budget, no
    # Retry-After, about 10 s late, the pod still there and the budget untouched
    assert conflicted.value.status == 409
    assert (conflicted.value.headers or {}).get("Retry-After") is None
    body = status_of(conflicted.value)
    assert body["reason"] == "Conflict"
    assert body["message"] == (
        'Operation cannot be fulfilled on poddisruptionbudgets.policy "web": the object has been modified; please '
        "apply your changes to the latest version and try again"
    )
    assert body["details"] == {"name": "web", "group": "policy", "kind": "poddisruptionbudgets"}
    assert took >= (eviction.CONFLICT_RETRIES - 1) * eviction.CONFLICT_RETRY_SECONDS
    assert kube.core.read_namespaced_pod(pods[0], "shop").metadata.deletion_timestamp is None
    assert kube.policy.read_namespaced_pod_disruption_budget("web", "shop").status.disruptions_allowed == 1
    # And once its writers are done, the eviction goes through
    server.contend_budget("shop", "web", contended=False)
    assert _evict(kube, pods[0]) == 201
