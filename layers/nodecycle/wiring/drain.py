"""The drain function's composition root: the step engine of the drain queue, with the cluster and budget."""

from __future__ import annotations

from datetime import timedelta
from functools import cache

from kubernetes.client import CoreV1Api

from nodecycle.adapters.ec2_instances import Ec2Instances
from nodecycle.adapters.kube.cluster import KubeCluster
from nodecycle.adapters.kube.eks_access import EksCluster
from nodecycle.adapters.kube_budget import ConfigMapBudgetStore, KubeNodeInventory
from nodecycle.domain.budget import BudgetLimits, DisruptionBudget
from nodecycle.domain.completion import CompleteAction
from nodecycle.domain.drain.steps import (
    AcquireSlot,
    Cleanup,
    Cordon,
    Evict,
    NodeFinder,
    ReadinessGate,
    WaiterWaker,
)
from nodecycle.domain.engine import StepEngine, StepHandler
from nodecycle.domain.flow import Worker
from nodecycle.domain.model import Step
from nodecycle.wiring.common import common

NODE_LIST_CACHE = timedelta(seconds=10)


@cache
def eks() -> EksCluster:
    cluster_name = common().settings.cluster_name
    if cluster_name is None:
        raise RuntimeError(
            "a Kubernetes step ran without NODECYCLE_CLUSTER_NAME: the plan and settings disagree"
        )
    return EksCluster(cluster_name)


def core_api() -> CoreV1Api:
    return CoreV1Api(eks().api_client())


@cache
def budget() -> DisruptionBudget:
    shared = common()
    settings = shared.settings
    return DisruptionBudget(
        store=ConfigMapBudgetStore(core_api, namespace=settings.budget_namespace),
        nodes=KubeNodeInventory(
            core_api, label_selector=settings.budget_node_selector, cache_ttl=NODE_LIST_CACHE
        ),
        clock=shared.clock,
        metrics=shared.metrics,
        limits=BudgetLimits(
            max_unavailable=settings.budget_max_unavailable,
            max_unavailable_per_zone=settings.budget_max_unavailable_per_zone,
        ),
        holder_ttl=timedelta(seconds=settings.budget_holder_ttl_seconds),
        count_unavailable=settings.budget_count_unavailable,
        owner=settings.owner_id,
    )


@cache
def cluster() -> KubeCluster:
    return KubeCluster(lambda: eks().api_client())


def waker() -> WaiterWaker:
    shared = common()
    return WaiterWaker(records=shared.records, queues=shared.queues, metrics=shared.metrics)


@cache
def engine() -> StepEngine:
    shared = common()
    settings = shared.settings
    finder = NodeFinder(cluster(), Ec2Instances())
    steps: dict[Step, StepHandler] = {
        Step.COMPLETE: CompleteAction(shared.autoscaling, shared.metrics),
    }
    if settings.uses_kubernetes:
        # The Kubernetes steps are built on first use: a stack without a cluster never connects to one.
        steps |= {
            Step.ACQUIRE_SLOT: AcquireSlot(
                finder=finder, cluster=cluster(), slots=budget(), settings=settings, metrics=shared.metrics
            ),
            Step.CORDON: Cordon(cluster=cluster(), settings=settings),
            Step.EVICT: Evict(cluster=cluster(), slots=budget(), settings=settings, metrics=shared.metrics),
            Step.CLEANUP: Cleanup(cluster=cluster(), slots=budget(), waker=waker()),
            Step.READY_GATE: ReadinessGate(finder=finder, settings=settings, metrics=shared.metrics),
        }
    return shared.engine(Worker.DRAIN, steps)
