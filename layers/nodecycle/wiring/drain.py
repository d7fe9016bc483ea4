"""The drain function's composition root: the step engine of the drain queue, with the cluster and budget."""

from __future__ import annotations

import os
from datetime import timedelta
from functools import cache

from nodecycle.adapters.aws.instances import Ec2Instances
from nodecycle.adapters.aws.queues import SqsRedeliveries
from nodecycle.adapters.kube.budget import ConfigMapBudgetStore, KubeDrainsInProgress, KubeNodeInventory
from nodecycle.adapters.kube.cluster_api import KubeCluster
from nodecycle.adapters.kube.core_v1 import CoreV1
from nodecycle.adapters.kube.eks_access import EksCluster
from nodecycle.adapters.kube.events import KubeEvents
from nodecycle.domain.budget import BudgetLimits, DisruptionBudget
from nodecycle.domain.completion import CompleteAction, SettleResults
from nodecycle.domain.drain.acquire import AcquireSlot, RecordedLifecycles, longest_wait_in_line
from nodecycle.domain.drain.cleanup import MAINTENANCE_POLLS_PER_LOOK, Cleanup
from nodecycle.domain.drain.cordon import Cordon
from nodecycle.domain.drain.evict import Evict
from nodecycle.domain.drain.forget import ForgetNode
from nodecycle.domain.engine import StepEngine, StepHandler
from nodecycle.domain.flow import Worker
from nodecycle.domain.launch import ReadinessGate
from nodecycle.domain.model import Step
from nodecycle.domain.nodes import NodeFinder
from nodecycle.settings import Budget, DrainSettings, FunctionSettings

# (in common since the eip function, intake and the sweeper keep to the invocation's time too: here where the drain's
# handler and its tests find them)
from nodecycle.wiring.common import MIN_RUN_SECONDS as MIN_RUN_SECONDS
from nodecycle.wiring.common import STEP_RESERVE_SECONDS as STEP_RESERVE_SECONDS
from nodecycle.wiring.common import Common, common, drain_policy, readiness_policy
from nodecycle.wiring.common import InvocationTime as InvocationTime
from nodecycle.wiring.common import invocation_time as invocation_time
from nodecycle.wiring.engines import worker_engine

# How old the budget's view of the nodes in scope may be (see KubeNodeInventory): their count changes as a
# group scales, slowly; their health (cordons, NotReady) can change at any moment, so it is read more often.
NODE_COUNTS_MAX_AGE = timedelta(seconds=60)
NODE_STATES_MAX_AGE = timedelta(seconds=10)


@cache
def settings() -> DrainSettings:
    return DrainSettings.from_env(os.environ)


def shared() -> Common:
    return common(settings())


@cache
def redeliveries() -> SqsRedeliveries | None:
    """The queue this function polls (the drain queue, or the wake queue for the wake function, which runs this
    code), as a record of it retried on purpose comes back sooner than its visibility timeout (None: not set)."""
    config = settings()
    url = config.work_queue_url
    return None if url is None else SqsRedeliveries(url, config.work_visibility_timeout_seconds)


# -- the cluster: also what the sweeper uses -----------------------------------------------------------


@cache
def eks(cluster_name: str) -> EksCluster:
    # (every Kubernetes call of a drain invocation ends within its time: see eks_access.call_timeout)
    return EksCluster(cluster_name, time_left=invocation_time().left)


def _cluster_name(config: FunctionSettings) -> str:
    if config.cluster_name is None:
        raise RuntimeError(
            "a Kubernetes step ran without NODECYCLE_CLUSTER_NAME: the plan and settings disagree"
        )
    return config.cluster_name


@cache
def cluster(config: FunctionSettings) -> KubeCluster:
    access = eks(_cluster_name(config))
    return KubeCluster(access.api_client)


@cache
def budget(config: Budget, ports: Common, poll_seconds: float = 0) -> DisruptionBudget:
    """The disruption budget; ``poll_seconds``: the drain's poll, for the function whose waiters ask (the
    sweeper's budget asks for nobody)."""
    access = eks(_cluster_name(ports.settings))

    def core_api() -> CoreV1:
        return CoreV1(access.api_client())

    return DisruptionBudget(
        store=ConfigMapBudgetStore(core_api, namespace=config.budget_namespace),
        nodes=KubeNodeInventory(
            core_api,
            label_selector=config.budget_node_selector,
            with_status=config.budget_count_unavailable,
            max_age=NODE_STATES_MAX_AGE if config.budget_count_unavailable else NODE_COUNTS_MAX_AGE,
        ),
        clock=ports.clock,
        metrics=ports.metrics,
        limits=BudgetLimits(
            max_unavailable=config.budget_max_unavailable,
            max_unavailable_per_zone=config.budget_max_unavailable_per_zone,
        ),
        holder_ttl=timedelta(seconds=config.budget_holder_ttl_seconds),
        count_unavailable=config.budget_count_unavailable,
        owner=ports.settings.owner_id,
        drains=KubeDrainsInProgress(core_api),
        lifecycles=RecordedLifecycles(ports.records),
        # (a waiter's place is written again only when it would expire within two of its asks: see ``renew``)
        waiter_asks_within=timedelta(
            seconds=longest_wait_in_line(
                config.budget_retry_seconds, timedelta(seconds=config.budget_holder_ttl_seconds), poll_seconds
            )
        ),
    )


@cache
def engine() -> StepEngine:
    config = settings()
    ports = shared()
    readiness = readiness_policy(config, poll_seconds=config.drain_poll_seconds)
    steps: dict[Step, StepHandler] = {
        Step.COMPLETE: CompleteAction(ports.autoscaling, ports.metrics, ports.records)
    }
    if config.uses_kubernetes:
        # The Kubernetes steps are built on first use: a stack without a cluster never connects to one.
        policy = drain_policy(config)
        nodes = cluster(config)
        slots = budget(config, ports, config.drain_poll_seconds)
        instances = Ec2Instances()
        finder = NodeFinder(nodes, instances)
        events = KubeEvents(eks(_cluster_name(config)).api_client, owner=config.owner_id)
        steps |= {
            Step.ACQUIRE_SLOT: AcquireSlot(
                finder=finder,
                cluster=nodes,
                slots=slots,
                dispatcher=ports.dispatcher(),
                policy=policy,
                metrics=ports.metrics,
                events=events,
                records=ports.records,
                maintenance=instances,
            ),
            Step.CORDON: Cordon(
                finder=finder,
                cluster=nodes,
                slots=slots,
                dispatcher=ports.dispatcher(),
                policy=policy,
                metrics=ports.metrics,
                events=events,
                clock=ports.clock,
                lifecycles=RecordedLifecycles(ports.records),
            ),
            Step.FORGET_NODE: ForgetNode(
                finder=finder,
                cluster=nodes,
                slots=slots,
                dispatcher=ports.dispatcher(),
                instances=instances,
                policy=policy,
            ),
            Step.EVICT: Evict(
                cluster=nodes,
                slots=slots,
                dispatcher=ports.dispatcher(),
                instances=instances,
                policy=policy,
                metrics=ports.metrics,
                events=events,
                time_left=invocation_time().left,
            ),
            Step.CLEANUP: Cleanup(
                cluster=nodes,
                slots=slots,
                dispatcher=ports.dispatcher(),
                autoscaling=ports.autoscaling,
                metrics=ports.metrics,
                events=events,
                instances=instances,
                maintenance_poll_seconds=MAINTENANCE_POLLS_PER_LOOK * config.drain_poll_seconds,
                maintenance_lead=policy.maintenance_lead,
            ),
            Step.READY_GATE: ReadinessGate(
                finder=finder,
                cluster=nodes,
                instances=instances,
                autoscaling=ports.autoscaling,
                dispatcher=ports.dispatcher(),
                policy=readiness,
                metrics=ports.metrics,
                events=events,
            ),
        }
    return worker_engine(ports, Worker.DRAIN, steps, SettleResults(readiness=readiness.on_failure))
