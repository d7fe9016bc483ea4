"""The drain steps against an in-memory cluster and budget: the step logic, without a server."""

from __future__ import annotations

import json
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from datetime import datetime, timedelta

import pytest

from nodecycle.domain.budget import (
    BudgetDocument,
    BudgetLimits,
    DisruptionBudget,
    Holder,
    SlotDecision,
    SlotRequest,
    Waiter,
)
from nodecycle.domain.budget.document import OwnerLimits, ResolvedLimits
from nodecycle.domain.completion import CompleteAction
from nodecycle.domain.dispatch import Dispatcher
from nodecycle.domain.drain.acquire import FORCED_SLOT, AcquireSlot
from nodecycle.domain.drain.cleanup import (
    MAINTENANCE_OVER_AFTER,
    MAINTENANCE_POLL_SECONDS,
    POOL_IDLE_POLL_SECONDS,
    POOL_POLL_SECONDS,
    POOL_WATCH_SECONDS,
    Cleanup,
)
from nodecycle.domain.drain.cordon import CORDON_REFUSED, Cordon
from nodecycle.domain.drain.evict import FORCED_POD_SLACK, STUCK_PODS, Evict
from nodecycle.domain.drain.forget import ForgetNode
from nodecycle.domain.drain.pod_notes import PodNotes
from nodecycle.domain.engine import StepHandler, advance
from nodecycle.domain.errors import TransientError
from nodecycle.domain.flow import Worker, settle_step
from nodecycle.domain.launch import ReadinessGate
from nodecycle.domain.model import LifecycleRecord, Step, Transition
from nodecycle.domain.nodes import NodeFinder
from nodecycle.domain.policy import ActionResult, DrainPolicy, Quantity, ReadinessPolicy
from nodecycle.domain.ports.cluster import (
    Claim,
    Cluster,
    Eviction,
    EvictionResult,
    NodeInfo,
    PodInfo,
    Refused,
)
from nodecycle.domain.ports.instances import GONE_STATES, ScheduledEvent
from nodecycle.domain.sweep.lifecycles import MAX_RESUMES
from nodecycle.settings import DrainSettings
from nodecycle.wiring.common import drain_policy, readiness_policy
from tests.support.fakes import (
    T0,
    FakeAutoscaling,
    FakeClock,
    FakeMetrics,
    InMemoryRecords,
    LaunchingGroup,
    RecordingQueues,
)
from tests.unit.budget.fakes import FakeInventory, MemoryBudgetStore, RecordingMetrics
from tests.unit.drain.builders import no_end, pod
from tests.unit.foundation.test_engine import make_record

INSTANCE = "i-0123456789abcdef0"
NODE = "ip-10-0-1-23.eu-west-1.compute.internal"


def settings(**changes: str) -> DrainSettings:
    env = {
        "NODECYCLE_OWNER_ID": "stack-a",
        "NODECYCLE_CLUSTER_NAME": "sandbox",
        "NODECYCLE_MANAGED_GROUPS": "nodes",
        "NODECYCLE_RECORD_TABLE": "t",
        "NODECYCLE_DRAIN_QUEUE_URL": "q",
        "NODECYCLE_EIP_QUEUE_URL": "e",
        "NODECYCLE_WAKE_QUEUE_URL": "w",
        "NODECYCLE_DRAIN_TIMEOUT_SECONDS": "600",
        "NODECYCLE_POD_GRACE_CAP_SECONDS": "60",
        "NODECYCLE_FORCE_GRACE_SECONDS": "5",
        "NODECYCLE_DRAIN_POLL_SECONDS": "5",
        "NODECYCLE_BUDGET_RETRY_SECONDS": "30",
        "NODECYCLE_READINESS_TIMEOUT_SECONDS": "300",
    }
    return DrainSettings.from_env(env | {f"NODECYCLE_{key.upper()}": value for key, value in changes.items()})


def policy(**changes: str) -> DrainPolicy:
    return drain_policy(settings(**changes))


def readiness(**changes: str) -> ReadinessPolicy:
    config = settings(**changes)
    return readiness_policy(config, poll_seconds=config.drain_poll_seconds)


def node(**changes: object) -> NodeInfo:
    """The instance's node as the API server gives it; ``changes`` override any field. Like any object it has
    a uid, one of its own for each name and instance (a node registered again gets a new one)."""
    name, instance = changes.get("name", NODE), changes.get("instance_id", INSTANCE)
    base = NodeInfo(
        name=NODE,
        instance_id=INSTANCE,
        zone="eu-west-1a",
        uid=f"uid-{name}-{instance}",
        ready=True,
        owner=None,
        in_progress=None,
        resource_version="7",
    )
    return base.model_copy(update=changes)


@dataclass
class FakeCluster:
    nodes: dict[str, NodeInfo] = field(default_factory=dict)
    pods: list[PodInfo] = field(default_factory=list)
    pod_nodes: dict[str, str] = field(default_factory=dict)  # pod name -> its node, when not NODE
    now: datetime = T0  # the API server's clock: deletions are timed by it
    blocked: set[str] = field(default_factory=set)  # pods a PodDisruptionBudget without room protects
    # PodDisruptionBudgets with room: each pod's budget, and the disruptions each budget still allows. An
    # eviction it allows takes one, as kube-apiserver's does, even when the pod's uid precondition then fails
    budget_of: dict[str, str] = field(default_factory=dict)
    room: dict[str, int] = field(default_factory=dict)
    refused: dict[str, str] = field(default_factory=dict)  # pods the API server will not evict, and why
    # Namespaces being deleted: the API server takes no eviction there (403, cause NamespaceTerminating)
    ending_namespaces: set[str] = field(default_factory=set)
    undeletable: dict[str, str] = field(default_factory=dict)  # pods the API server will not delete, and why
    # Pods whose every eviction and deletion fails as the adapter fails one that timed out or got a 502-504:
    # with a TransientError, and why
    failing: dict[str, str] = field(default_factory=dict)
    cordoned: set[str] = field(default_factory=set)  # nodes marked unschedulable
    conflicts: int = 0  # the next claims that find the node changed
    evictions: list[tuple[str, int]] = field(default_factory=list)
    deletions: list[tuple[str, int]] = field(default_factory=list)
    patches: list[dict[str, object]] = field(default_factory=list)
    # When each node's kubelet last renewed its Lease (None: the node has none). A node not listed has a live
    # kubelet, which renewed it at the API server's ``now``
    leases: dict[str, datetime | None] = field(default_factory=dict)
    leases_refused: str | None = None  # why the API server refuses to read any Lease (a 403), if it does
    pods_refused: str | None = None  # why the API server refuses to list pods (a 403), if it does
    # Why every list of pods fails as the adapter fails one that timed out or got a 5xx (a TransientError), if it
    # does: an API server whose lists alone fail (an overloaded etcd range, a list shed by its priority level)
    pods_failing: str | None = None
    # How many of the next evictions API Priority and Fairness sheds (429 without a budget: nothing is done),
    # whichever pod they are of (before anything is looked at: a pod gone too), and the Retry-After it says
    shed: int = 0
    shed_retry_after: float = 1.0
    node_reads: list[str] = field(default_factory=list)  # the nodes read whole, in order
    metadata_reads: list[str] = field(default_factory=list)  # the nodes whose metadata only was read
    metadata_lists: list[str] = field(default_factory=list)  # the nodes whose pods' metadata only was listed
    _read_at: dict[tuple[str, str], NodeInfo] = field(default_factory=dict)  # each node as read at a version

    def find_node(
        self, instance_id: str, private_dns_name: str | None, *, scan: bool = True
    ) -> NodeInfo | None:
        # As the adapter: by its DNS name (one GET), else only when allowed to scan, by provider id; a node
        # of that name without a provider id yet (still registering) is taken as the instance's
        by_name = self.nodes.get(private_dns_name) if private_dns_name else None
        if by_name is not None and by_name.instance_id == instance_id:
            return by_name
        found = next((n for n in self.nodes.values() if n.instance_id == instance_id), None) if scan else None
        return found or (by_name if by_name is not None and by_name.instance_id is None else None)

    def get_node(self, name: str) -> NodeInfo | None:
        found = self.nodes.get(name)
        if found is not None:
            self.node_reads.append(name)
            self._read_at.setdefault((name, found.resource_version), found)
        return found

    def node_version(self, name: str) -> tuple[str | None, str] | None:
        # As the API server, where each change moves the version: a node whose content is not the one first read
        # at its version (a test's NodeInfo replaced, keeping the version) is at another version
        current = self.nodes.get(name)
        if current is None:
            return None
        self.metadata_reads.append(name)
        first = self._read_at.get((name, current.resource_version), current)
        return current.uid, current.resource_version + ("" if first == current else "+")

    def lease_renewed_at(self, node: str) -> datetime | None:
        if self.leases_refused is not None:
            raise Refused(self.leases_refused)
        if node in self.leases:
            return self.leases[node]
        return self.now if node in self.nodes else None

    def claim_node(
        self, node: NodeInfo, *, owner: str, in_progress: str, cordon: bool, exclude_from_lb: bool
    ) -> Claim:
        refused = self._precondition(node)
        if refused is not None:
            return refused
        self.patches.append(
            {"owner": owner, "in_progress": in_progress, "cordon": cordon, "lb": exclude_from_lb}
        )
        current = self.nodes[node.name]
        self._patched(
            node,
            owner=owner,
            in_progress=in_progress,
            released_for=None,
            unschedulable=current.unschedulable or cordon,
            excluded_from_lb=current.excluded_from_lb or exclude_from_lb,
        )
        if cordon:
            self.cordoned.add(node.name)
        return Claim.CLAIMED

    def release_node(
        self,
        node: NodeInfo,
        *,
        uncordon: bool = False,
        unlabel: bool = False,
        released_for: str | None = None,
    ) -> Claim:
        refused = self._precondition(node)
        if refused is not None:
            return refused
        self.patches.append(
            {
                "owner": None,
                "in_progress": None,
                **({"cordon": False} if uncordon else {}),
                **({"lb": False} if unlabel else {}),
                **({"released_for": released_for} if released_for else {}),
            }
        )
        current = self.nodes[node.name]
        self._patched(
            node,
            owner=None,
            in_progress=None,
            released_for=released_for,
            unschedulable=current.unschedulable and not uncordon,
            excluded_from_lb=current.excluded_from_lb and not unlabel,
        )
        if uncordon:
            self.cordoned.discard(node.name)
        return Claim.CLAIMED

    def _precondition(self, node: NodeInfo) -> Claim | None:
        """As the API server answers a patch carrying the resourceVersion it was read at: 404 for a node that
        is gone, 409 for one changed since (``conflicts``: that many more changes by someone else)."""
        current = self.nodes.get(node.name)
        if current is None:
            return Claim.GONE
        if self.conflicts:
            self.conflicts -= 1
            return Claim.CONFLICT
        # (a node registered again under the name is another object: it was never at the version read)
        if (current.resource_version, current.uid) != (node.resource_version, node.uid):
            return Claim.CONFLICT
        return None

    def _patched(self, node: NodeInfo, **changes: object) -> None:
        current = self.nodes[node.name]
        version = str(int(current.resource_version or "0") + 1)
        self.nodes[node.name] = current.model_copy(update={**changes, "resource_version": version})

    def pods_on(self, node: str) -> list[PodInfo]:
        if self.pods_refused is not None:
            raise Refused(self.pods_refused)
        if self.pods_failing is not None:
            raise TransientError(f"listing the pods of node {node}: {self.pods_failing}")
        return [p for p in self.pods if self.pod_nodes.get(p.name, NODE) == node]

    def pod_metadata_on(self, node: str) -> list[PodInfo]:
        # As the API server's PartialObjectMetadataList: the pods' metadata, not their spec (their grace)
        self.metadata_lists.append(node)
        return [pod.model_copy(update={"grace_period": None}) for pod in self.pods_on(node)]

    def evict(self, pod: PodInfo, grace_seconds: int) -> EvictionResult:
        self._answered(pod)
        if self.shed:
            self.shed -= 1
            return EvictionResult(
                Eviction.THROTTLED, "Too many requests, please try again later.", self.shed_retry_after
            )
        current = self._named(pod)
        if current is None:
            return EvictionResult(Eviction.GONE)  # 404
        if pod.namespace in self.ending_namespaces:
            why = f"unable to create new content in namespace {pod.namespace} because it is being terminated"
            return EvictionResult(Eviction.NAMESPACE_TERMINATING, f'pods "{pod.name}" is forbidden: {why}')
        if pod.name in self.refused:
            return EvictionResult(Eviction.REFUSED, self.refused[pod.name])
        # As the API server does: a pod already being deleted is evicted without consulting its budget; and the
        # budget is consulted before the uid precondition, so that another pod of that name (a StatefulSet's)
        # under a budget without room is a 429, not the 409 of a pod gone
        if pod.name in self.blocked and not current.terminating:
            return EvictionResult(
                Eviction.BLOCKED, f"The disruption budget {pod.name}-pdb needs 1 healthy pods"
            )
        budget = self.budget_of.get(pod.name)
        if budget is not None and not current.terminating:
            if self.room.get(budget, 0) <= 0:
                return EvictionResult(Eviction.BLOCKED, f"The disruption budget {budget} has no room")
            self.room[budget] -= 1
        if current.uid != pod.uid:
            return EvictionResult(Eviction.GONE)  # 409: the uid precondition
        self.evictions.append((pod.name, grace_seconds))
        self._deleting(pod, grace_seconds)
        return EvictionResult(Eviction.EVICTED)

    def delete_pod(self, pod: PodInfo, grace_seconds: int) -> bool:
        self._answered(pod)
        if not self._there(pod):
            return False  # 404, or another pod of that name (uid precondition: 409)
        if pod.name in self.undeletable:
            raise Refused(self.undeletable[pod.name])
        self.deletions.append((pod.name, grace_seconds))
        self._deleting(pod, grace_seconds)
        return True

    def _answered(self, pod: PodInfo) -> None:
        if pod.name in self.failing:
            raise TransientError(f"calling for pod {pod.namespace}/{pod.name}: {self.failing[pod.name]}")

    def _there(self, pod: PodInfo) -> bool:
        return any((p.name, p.uid) == (pod.name, pod.uid) for p in self.pods)

    def _named(self, pod: PodInfo) -> PodInfo | None:
        return next((p for p in self.pods if (p.namespace, p.name) == (pod.namespace, pod.name)), None)

    def _deleting(self, pod: PodInfo, grace_seconds: int) -> None:
        if grace_seconds == 0:
            # As the API server does: a deletion without grace removes the pod at once (no finalizers here),
            # whatever its kubelet does
            self.pods = [p for p in self.pods if p.name != pod.name]
            return
        self.pods = [self._marked(p, grace_seconds) if p.name == pod.name else p for p in self.pods]

    def _marked(self, pod: PodInfo, grace_seconds: int) -> PodInfo:
        # As the API server does: the deadline is now + grace; a later, shorter grace counts from when the
        # deletion was first asked (the old deadline less the old grace), and a longer one changes nothing
        grace = timedelta(seconds=grace_seconds)
        if pod.deletion_requested_at is None:
            return pod.model_copy(update={"deletion_at": self.now + grace, "deletion_grace": grace_seconds})
        if grace_seconds >= (pod.deletion_grace or 0):
            return pod
        return pod.model_copy(
            update={"deletion_at": pod.deletion_requested_at + grace, "deletion_grace": grace_seconds}
        )


MESSAGE_LIMIT = 1024  # the characters of a message KubeEvents writes (tests/contracts/test_drain_cluster.py)


@dataclass
class FakeEvents:
    """The events written, as (subject, reason, type): a node's name, or namespace/name of a pod."""

    written: list[tuple[str, str, str]] = field(default_factory=list)
    messages: list[str] = field(default_factory=list)
    uids: list[str | None] = field(default_factory=list)  # the uid each event names its subject by
    refused: str | None = None  # why the API server refuses every event (a 403: a role without the rule)
    # Namespaces deleted: no event can be written there (a 404)
    gone_namespaces: set[str] = field(default_factory=set)

    def on_node(
        self, node: str, uid: str | None, reason: str, message: str, *, warning: bool = False
    ) -> None:
        self._write("default", node, uid, reason, message, warning)

    def on_pod(self, pod: PodInfo, reason: str, message: str, *, warning: bool = False) -> None:
        self._write(pod.namespace, f"{pod.namespace}/{pod.name}", pod.uid or None, reason, message, warning)

    def _write(
        self, namespace: str, subject: str, uid: str | None, reason: str, message: str, warning: bool
    ) -> None:
        # As KubeEvents: best effort, so an event the API server refuses (403) or cannot take (its namespace is
        # gone: 404) is not written, and no error is raised; a message is cut to what an Event takes
        if self.refused is not None or namespace in self.gone_namespaces:
            return
        self.written.append((subject, reason, "Warning" if warning else "Normal"))
        self.messages.append(message[:MESSAGE_LIMIT])
        self.uids.append(uid)


OWNER = "stack-a"  # the stack the tests' records and settings are of
HOLDER_TTL = timedelta(seconds=600)  # as deployed (BudgetHolderTtlSeconds)
ZONE = "eu-west-1a"


class FakeSlots:
    """The budget the drain steps use: the real :class:`DisruptionBudget` over :class:`MemoryBudgetStore`, seeded
    with a scenario, and recording what the steps asked. Not kinder than the budget (a fake that grants what the
    budget refuses, or wakes whom it would not, let tests pass that production fails;
    tests/contracts/test_drain_slots.py holds it to the budget's answers).

    The scenario, of this stack (``OWNER``) unless told:
    - ``room``: the stack's limit (maxUnavailable); ``per_zone``: its per-zone limit, if any;
    - ``holders``: nodes holding a slot, each for lifecycle ``held_for[node]`` of instance
      ``held_instance[node]``: by default the test's lifecycle (``terminating()``'s) for NODE, and a lifecycle of
      an instance of its own for any other node;
    - ``others``: nodes held by another stack (node -> that owner);
    - ``writers``: the other stacks that write in this budget (their limits recorded, as every write records its
      writer's), whatever they hold; a stack named only in ``others`` writes nothing else;
    - ``lost``: NODE's slot expired and was removed, and the room went to another node: a renewal is denied
      (``lost``), unless forced; setting it false later frees that room again;
    - ``waiters``: this stack's lifecycles waiting in line (record ids), each for a node of its own;
    - ``position``: the test's node's place in line when it asks and finds no room (so many nodes wait before
      it);
    - ``refused``: why the API server refuses the budget's reads and writes (a 403), if it does: every call
      reads the budget first, so each of them is refused (settable: the refusal stops).
    The budget's clock is ``clock`` (T0 unless moved: entries expire only as it moves, as the budget's would).
    """

    def __init__(
        self,
        room: int = 1,
        holders: Collection[str] = (),
        held_for: dict[str, str] | None = None,
        held_instance: dict[str, str] | None = None,
        others: dict[str, str] | None = None,
        lost: bool = False,
        waiters: Collection[str] = (),
        position: int = 1,
        refused: str | None = None,
        per_zone: int | None = None,
        clock: FakeClock | None = None,
        writers: Collection[str] = (),
    ) -> None:
        self.clock = clock or FakeClock(T0)
        self.store = MemoryBudgetStore()
        self.budget = DisruptionBudget(
            store=self.store,
            nodes=FakeInventory(),
            clock=self.clock,
            metrics=RecordingMetrics(),
            limits=BudgetLimits(Quantity(value=room), None if per_zone is None else Quantity(value=per_zone)),
            holder_ttl=HOLDER_TTL,
            count_unavailable=False,
            owner=OWNER,
        )
        self.refused = refused
        self.requests: list[SlotRequest] = []  # the slot requests the budget answered
        self.released: list[str] = []  # the nodes whose slot (or place in line) a release gave back
        self.forgotten: list[str] = []  # the instances forgotten (by forget, or a release's ``gone``)
        self.position = position
        held_for, held_instance = held_for or {}, held_instance or {}
        now = self.clock.now()
        entries = [
            self._holder(node, held_for.get(node), held_instance.get(node), OWNER, now)
            for node in sorted(holders)
            if not (lost and node == NODE)
        ]
        entries += [
            self._holder(node, None, None, owner, now) for node, owner in sorted((others or {}).items())
        ]
        self._filler = "ip-10-0-9-9.eu-west-1.compute.internal"  # the node that took NODE's room when lost
        if lost:
            entries += [self._holder(self._filler, None, None, OWNER, now)]
        line = [
            Waiter(
                node=f"ip-10-0-7-{i}.eu-west-1.compute.internal",
                instance_id=record_id.split("/")[0],
                zone=ZONE,
                owner=OWNER,
                record_id=record_id,
                renewed_at=now,
                ttl_seconds=int(HOLDER_TTL.total_seconds()),
                waiting_since=now - timedelta(seconds=len(waiters) - i),
            )
            for i, record_id in enumerate(waiters)
        ]
        limits = {
            owner: OwnerLimits(
                max_unavailable="1",
                max_unavailable_per_zone=None,
                count_unavailable=False,
                nodes_in_scope=None,
                resolved=ResolvedLimits(total=1, per_zone=None),
                updated_at=now,
            )
            for owner in writers
        }
        self._written(BudgetDocument(holders=tuple(entries), waiters=tuple(line), limits=limits))

    @staticmethod
    def _holder(
        node: str, record_id: str | None, instance_id: str | None, owner: str, now: datetime
    ) -> Holder:
        default = (INSTANCE, f"{INSTANCE}/terminate/token") if node == NODE else (f"i-{node}", f"rec-{node}")
        return Holder(
            node=node,
            instance_id=instance_id or default[0],
            zone=ZONE,
            owner=owner,
            record_id=record_id or default[1],
            # (the tests' records of the instance carry make_record's token)
            token="token" if node == NODE else None,
            renewed_at=now,
            ttl_seconds=int(HOLDER_TTL.total_seconds()),
            acquired_at=now,
        )

    @property
    def holders(self) -> set[str]:
        """The nodes holding a slot of this stack now."""
        return {
            h.node for h in self._document().holders if h.owner == OWNER and not h.expired(self.clock.now())
        }

    @property
    def held_for(self) -> dict[str, str]:
        """The lifecycle each node's slot is held for."""
        return {h.node: h.record_id for h in self._document().holders if not h.expired(self.clock.now())}

    @property
    def waiting(self) -> list[str]:
        """The lifecycles waiting in line, in first-come order."""
        return [w.record_id for w in self._document().waiters if not w.expired(self.clock.now())]

    @property
    def lost(self) -> bool:
        return self._filler in self.holders and NODE not in self.holders

    @lost.setter
    def lost(self, lost: bool) -> None:
        assert not lost, "a slot is lost by the scenario the fake is built with"
        # the drain that took the lost slot's room ended: its release frees the room
        self.budget.release(self._filler, f"rec-{self._filler}")

    def _document(self) -> BudgetDocument:
        return self.store.read() or BudgetDocument()

    def _written(self, doc: BudgetDocument) -> None:
        """``doc`` stored, as another writer's write (the scenario's other drains and waiters)."""
        self.store.text = doc.to_json()
        self.store.version += 1

    def acquire(self, request: SlotRequest) -> SlotDecision:
        self._answer()
        decision = self._queued(lambda: self.budget.acquire(request), request)
        self.requests.append(request)
        return decision

    def renew(self, request: SlotRequest) -> SlotDecision:
        self._answer()
        decision = self._queued(lambda: self.budget.renew(request), request)
        self.requests.append(request)
        return decision

    def _queued(self, ask: Callable[[], SlotDecision], request: SlotRequest) -> SlotDecision:
        """``ask``, with ``position - 1`` nodes of this stack joining the line first when the request's node
        is not in it yet (a node that finds no room takes its place behind them)."""
        now = self.clock.now()
        doc = self._document()
        ahead = self.position - 1
        if ahead and doc.waiter(request.node) is None and doc.holder(request.node) is None:
            line = tuple(
                Waiter(
                    node=f"ip-10-0-6-{i}.eu-west-1.compute.internal",
                    instance_id=f"i-0ahead{i}",
                    zone=request.zone,
                    owner=OWNER,
                    record_id=f"i-0ahead{i}/terminate/t",
                    renewed_at=now,
                    ttl_seconds=int(HOLDER_TTL.total_seconds()),
                    waiting_since=now - timedelta(seconds=ahead - i),
                )
                for i in range(ahead)
            )
            self._written(doc.model_copy(update={"waiters": (*doc.waiters, *line)}))
            self.position = 1
        return ask()

    def forget(self, owner: str, instance_id: str) -> list[str]:
        self._answer()
        woken = self.budget.forget(owner, instance_id)
        self.forgotten.append(instance_id)
        return woken

    def release(
        self, node: str, record_id: str, token: str | None = None, *, gone: str | None = None
    ) -> list[str]:
        self._answer()
        before = self._document()
        woken = self.budget.release(node, record_id, token, gone=gone)
        if gone is not None:
            self.forgotten.append(gone)
        if any(e.node == node and e.record_id == record_id for e in before.entries()) and not any(
            e.node == node and e.record_id == record_id for e in self._document().entries()
        ):
            self.released.append(node)
        return woken

    def _answer(self) -> None:
        """As the ConfigMap store: every call reads the budget first, so a 403 refuses each of them."""
        if self.refused is not None:
            raise Refused(self.refused)


@dataclass
class NoDns:
    """EC2 that knows no DNS name; and the states it gives (none: the instances are gone)."""

    known: dict[str, str] = field(default_factory=dict)

    def private_dns_name(self, instance_id: str) -> str | None:
        return None

    def alive(self, instance_ids: Collection[str]) -> set[str]:
        # as Ec2Instances answers: those EC2 knows and that are not going (an unknown id is gone, not alive)
        return {instance for instance, state in self.states(instance_ids).items() if state not in GONE_STATES}

    def states(self, instance_ids: Collection[str]) -> dict[str, str]:
        return {instance: self.known[instance] for instance in instance_ids if instance in self.known}

    def last_started(self, instance_id: str) -> datetime | None:
        return None  # (no start told: a launch's gate judges its node by the cluster alone)


@dataclass
class Ec2Maintenance(NoDns):
    """EC2 as the cleanup after a maintenance drain asks it: the instances' states (``known``) and the events it
    lists as pending for the test's instance (one carried out or called off is listed no more as pending)."""

    events: list[ScheduledEvent] = field(default_factory=list)

    def scheduled_events(self, instance_id: str) -> list[ScheduledEvent]:
        return list(self.events) if instance_id == INSTANCE else []


class Dns(NoDns):
    """EC2 as it answers for the test's instance: its private DNS name is the node's name (EKS's default)."""

    def private_dns_name(self, instance_id: str) -> str | None:
        return NODE if instance_id == INSTANCE else None


def wakes_to_nowhere() -> Dispatcher:
    """A dispatcher whose wake-ups find no waiting record (a step's wake-ups are not what the test is of)."""
    return Dispatcher(
        records=InMemoryRecords(), queues=RecordingQueues(), clock=FakeClock(T0), metrics=FakeMetrics()
    )


def terminating(step: Step, **changes: object) -> LifecycleRecord:
    plan = (Step.ACQUIRE_SLOT, Step.CORDON, Step.EVICT, Step.COMPLETE, Step.CLEANUP, Step.DONE)
    record = make_record(plan, step, instance_id=INSTANCE, id=f"{INSTANCE}/terminate/token")
    return record.model_copy(update=changes)


def cordon(cluster: Cluster, **ports: object) -> Cordon:
    """The cordon step on ``cluster``, with fakes for the ports ``ports`` does not name."""
    defaults: dict[str, object] = {
        "finder": NodeFinder(cluster, NoDns()),
        "slots": FakeSlots(),
        "dispatcher": wakes_to_nowhere(),
        "policy": policy(),
        "metrics": FakeMetrics(),
        "events": FakeEvents(),
        "clock": FakeClock(T0),  # (behind every step's ``now``: the drain's time is the step's, as at T0)
    }
    return Cordon(cluster=cluster, **(defaults | ports))  # type: ignore[arg-type]


# -- ACQUIRE_SLOT -------------------------------------------------------------------------------------------


def acquire(
    cluster: Cluster,
    slots: FakeSlots,
    metrics: FakeMetrics | None = None,
    events: FakeEvents | None = None,
    drain_policy: DrainPolicy | None = None,
    records: InMemoryRecords | None = None,
) -> AcquireSlot:
    """The slot's ask on ``cluster`` and ``slots``; ``records``: the lifecycles' records it reads (none unless
    given)."""
    return AcquireSlot(
        finder=NodeFinder(cluster, NoDns()),
        cluster=cluster,
        slots=slots,
        dispatcher=wakes_to_nowhere(),
        policy=drain_policy or policy(),
        metrics=metrics or FakeMetrics(),
        events=events or FakeEvents(),
        records=records or InMemoryRecords(),
    )


def test_a_missing_node_means_nothing_to_drain_and_the_action_completes() -> None:
    metrics = FakeMetrics()
    outcome = acquire(FakeCluster(), FakeSlots(), metrics)(terminating(Step.ACQUIRE_SLOT), T0)
    assert outcome.then is Step.COMPLETE
    assert outcome.changes["outcome"] == "node-not-found"
    assert metrics.counts["NodesNotFound"] == 1


def test_a_terminating_instance_with_no_node_to_drain_has_its_address_taken_back_before_its_completion() -> (
    None
):
    # Given a terminating instance of a stack that gives instances Elastic IPs, whose node is not in the
    # cluster (it never joined, or was deleted): the instance still holds its address, and one that goes back
    # to its warm pool keeps it there, out of the sweeper's reach (it frees addresses of gone instances only)
    plan = (
        Step.ACQUIRE_SLOT,
        Step.CORDON,
        Step.EVICT,
        Step.RELEASE_EIP,
        Step.COMPLETE,
        Step.CLEANUP,
        Step.DONE,
    )
    record = terminating(Step.ACQUIRE_SLOT, plan=plan)

    # When its drain begins, and finds nothing to drain
    outcome = acquire(FakeCluster(), FakeSlots())(record, T0)

    # Then the lifecycle goes on where its plan goes after a drain: the address taken back, then the completion
    assert (outcome.then, outcome.changes["outcome"]) == (Step.RELEASE_EIP, "node-not-found")
    assert settle_step(record.model_copy(update={"step": Step.EVICT})) is Step.RELEASE_EIP


def test_a_slot_is_taken_for_the_instances_node() -> None:
    cluster, slots = FakeCluster(nodes={NODE: node()}), FakeSlots()
    outcome = acquire(cluster, slots)(terminating(Step.ACQUIRE_SLOT), T0)
    assert (outcome.then, outcome.again) == (None, False)
    assert (outcome.changes["node"], outcome.changes["zone"]) == (NODE, "eu-west-1a")
    assert slots.holders == {NODE}


def test_without_room_the_node_waits_and_remembers_since_when() -> None:
    cluster, slots = FakeCluster(nodes={NODE: node()}), FakeSlots(room=1, holders={"other-node"})
    step = acquire(cluster, slots)
    first = step(terminating(Step.ACQUIRE_SLOT), T0)
    assert first.again
    assert first.delay == 30
    assert first.changes["slot_waiting_since"] == T0
    later = step(terminating(Step.ACQUIRE_SLOT, slot_waiting_since=T0), T0 + timedelta(seconds=30))
    assert later.changes["slot_waiting_since"] == T0


@pytest.mark.parametrize(
    ("position", "ttl", "delay"),
    [
        (1, "600", 30),  # next in line: every BudgetRetrySeconds
        (2, "600", 30),  # within the slots turning over now (2 holders)
        (3, "600", 60),  # a round of the holders ahead: twice as long
        (6, "600", 90),
        (400, "600", 120),  # at most 4 times as long
        (400, "330", 110),  # and never longer than a third of the place's TTL: each retry renews it in time
    ],
)
def test_a_waiter_far_back_in_line_asks_again_less_often(position: int, ttl: str, delay: float) -> None:
    # Given a budget of 2 slots, both held, and this node waiting at `position` (a burst: hundreds in line, each
    # asking every 30 s, read the whole queue from the API server 17 times a second at 500 waiters)
    cluster = FakeCluster(nodes={NODE: node()})
    slots = FakeSlots(room=2, holders={"h1", "h2"}, position=position)
    step = acquire(cluster, slots, drain_policy=policy(budget_holder_ttl_seconds=ttl))
    outcome = step(terminating(Step.ACQUIRE_SLOT), T0)
    # Then it asks again later the further back it stands (a released slot still wakes it at once)
    assert outcome.again
    assert outcome.delay == delay


def test_a_waiter_far_back_in_line_asks_again_when_its_global_timeout_makes_it_urgent() -> None:
    # Given a node far back in line whose action's global timeout is 45 s from making it go first
    cluster = FakeCluster(nodes={NODE: node()})
    slots = FakeSlots(room=2, holders={"h1", "h2"}, position=400)
    record = terminating(Step.ACQUIRE_SLOT)
    step = acquire(cluster, slots)
    step(record, T0)
    (asked,) = slots.requests
    assert asked.urgent_at is not None
    outcome = step(record, asked.urgent_at - timedelta(seconds=45))
    # Then it asks again when it is urgent, not two minutes later: another stack's free slot is taken at the
    # waiter's own ask
    assert outcome.delay == 45
    # and never sooner than every BudgetRetrySeconds
    assert step(record, asked.urgent_at - timedelta(seconds=5)).delay == 30


def test_a_waiter_next_for_its_zones_slot_asks_again_every_retry_behind_another_zones_line() -> None:
    # Given stacks of 2 slots and 1 per zone, another stack's slots held in zones a and b, six of this stack's
    # nodes waiting in zone a (most work left: they stand first in line), and this node of zone b asking
    clock = FakeClock(T0)
    store = MemoryBudgetStore()

    def budget(owner: str) -> DisruptionBudget:
        return DisruptionBudget(
            store=store,
            nodes=FakeInventory(),
            clock=clock,
            metrics=RecordingMetrics(),
            limits=BudgetLimits(Quantity(value=2), Quantity(value=1)),
            holder_ttl=timedelta(seconds=600),
            count_unavailable=False,
            owner=owner,
        )

    def ask(slots: DisruptionBudget, owner: str, name: str, zone: str) -> SlotDecision:
        return slots.acquire(SlotRequest(name, f"i-{name}", zone, owner, f"rec-{name}"))

    other, ours = budget("stack-b"), budget("stack-a")
    assert ask(other, "stack-b", "h1", "eu-west-1a").granted
    assert ask(other, "stack-b", "h2", "eu-west-1b").granted
    assert not any(ask(ours, "stack-a", f"a{i}", "eu-west-1a").granted for i in range(6))
    step = acquire(FakeCluster(nodes={NODE: node(zone="eu-west-1b")}), ours)  # type: ignore[arg-type]
    outcome = step(terminating(Step.ACQUIRE_SLOT), T0)
    # Then it waits, 7th in line but the next for zone b's slot: once the other stack gives it back (that
    # stack passes no slot to it), it is taken at this node's own ask, so that ask comes every
    # BudgetRetrySeconds, not four times later as for a node behind three rounds of the slots held
    assert outcome.again
    assert outcome.delay == 30


def test_a_waiter_is_paced_by_the_slots_its_limits_give_not_by_the_slots_held_now() -> None:
    # Given stacks of 2 slots each: this stack's two holders, then three of the other stack's nodes waiting,
    # then this node (4th in line, three rivals ahead of it)
    clock = FakeClock(T0)
    store = MemoryBudgetStore()

    def budget(owner: str) -> DisruptionBudget:
        return DisruptionBudget(
            store=store,
            nodes=FakeInventory(),
            clock=clock,
            metrics=RecordingMetrics(),
            limits=BudgetLimits(Quantity(value=2), None),
            holder_ttl=timedelta(seconds=600),
            count_unavailable=False,
            owner=owner,
        )

    def ask(slots: DisruptionBudget, owner: str, name: str) -> SlotDecision:
        return slots.acquire(SlotRequest(name, f"i-{name}", "eu-west-1a", owner, f"rec-{name}"))

    other, ours = budget("stack-b"), budget("stack-a")
    assert ask(ours, "stack-a", "a1").granted
    assert ask(ours, "stack-a", "a2").granted
    assert not any(ask(other, "stack-b", f"b{i}").granted for i in range(3))
    step = acquire(FakeCluster(nodes={NODE: node()}), ours)  # type: ignore[arg-type]
    assert step(terminating(Step.ACQUIRE_SLOT), T0).delay == 60  # a round of the two slots ahead of it
    # When this stack's drains end (a wave of releases): their slots are free, but owed to the other stack's
    # waiters, which take them at their own asks (no slot of another stack is passed on)
    ours.release("a1", "rec-a1")
    ours.release("a2", "rec-a2")
    clock.advance(60)
    outcome = step(terminating(Step.ACQUIRE_SLOT), clock.now())
    # Then it still stands a round of its two slots away, and asks as soon as before: not as if each of the
    # three ahead took a round of its own (no slot is held now), four times later than its turn may come
    assert outcome.again
    assert outcome.delay == 60


def test_a_waiter_asks_with_precedence_near_its_global_timeout_and_takes_a_slot_when_it_cannot_wait() -> None:
    # Given a full budget, and a terminating node whose action's global timeout is 10 minutes away (its
    # drain timeout is 600 s: a whole drain no longer fits before it)
    cluster, slots = FakeCluster(nodes={NODE: node()}), FakeSlots(room=1, holders={"other-node"})
    metrics = FakeMetrics()
    record = terminating(Step.ACQUIRE_SLOT)
    late = record.global_deadline - timedelta(minutes=10)
    # When it asks for a slot
    outcome = acquire(cluster, slots, metrics)(record, late)
    # Then it took one without room (it goes either way: a drain beats none), and says so
    (asked,) = slots.requests
    assert asked.force
    assert asked.urgent_at is not None
    assert asked.urgent_at < late
    assert (outcome.then, outcome.again) == (None, False)
    assert outcome.changes["extra"][FORCED_SLOT] is True
    assert metrics.counts["ForcedSlots"] == 1
    # And hours before its global timeout it asks like anyone else, and waits
    early_slots = FakeSlots(room=1, holders={"other-node"})
    assert acquire(cluster, early_slots, metrics)(record, T0).again
    (early,) = early_slots.requests
    assert not early.force


def test_a_cordon_near_the_global_timeout_leaves_the_timeout_policy_time_to_act() -> None:
    cluster = FakeCluster(nodes={NODE: node()})
    record = terminating(Step.CORDON, node=NODE)
    late = record.global_deadline - timedelta(minutes=5)
    outcome = cordon(cluster)(record, late)
    # force grace 5 s + a stuck pod's minute + 5 s for the looks at the deadline and the force's end + the engine's
    # guard point: where the sweeper's last run (every 5 minutes) would settle it, two 60 s heartbeat margins more
    # (later than margin + one fault's 150 s)
    assert outcome.changes["drain_deadline"] == record.global_deadline - timedelta(
        seconds=5 + 60 + 5 + 300 + 120
    )


def test_a_maintenance_drain_keeps_before_its_start_only_what_its_force_needs() -> None:
    # Given a full budget, and a maintenance 15 minutes away (its drain timeout 600 s, force grace 5 s): no action
    # is completed for it, so a whole drain (its timeout, the force's grace, 5 s for the looks) fits before it
    start = T0 + timedelta(minutes=15)
    cluster, slots = FakeCluster(nodes={NODE: node()}), FakeSlots(room=1, holders={"other-node"})
    # When it asks for a slot
    outcome = acquire(cluster, slots)(maintenance(Step.ACQUIRE_SLOT, start, node=None), T0)
    # Then it waits in line, not taken past the budget as a hook's action would be, whose settle margin and stuck
    # pod's minute do not fit in those 15 minutes
    (asked,) = slots.requests
    assert not asked.force
    assert outcome.again
    # And, cordoned 5 minutes before its start, it evicts under the PodDisruptionBudgets until the force must act
    # for its pods' grace to be over by the start, not until a hook's tail (8 minutes here) before it: past at once
    cordoned = cordon(cluster)(maintenance(Step.CORDON, start, node=NODE), start - timedelta(minutes=5))
    assert cordoned.changes["drain_deadline"] == start - timedelta(seconds=5 + 5)


def test_a_node_another_owner_drains_is_left_alone_until_our_drain_timeout() -> None:
    # Given a node that another nodecycle stack has claimed, and holds in the budget
    cluster, slots = FakeCluster(nodes={NODE: node(owner="stack-b")}), FakeSlots(others={NODE: "stack-b"})
    step = acquire(cluster, slots)

    # Then we wait without taking a slot, and after our drain timeout we settle our own action only
    waiting = step(terminating(Step.ACQUIRE_SLOT), T0)
    assert waiting.again
    assert slots.holders == set()
    done = step(terminating(Step.ACQUIRE_SLOT), T0 + timedelta(seconds=601))
    assert done.then is Step.COMPLETE
    assert done.changes["outcome"] == "node-owned-by:stack-b"
    assert cluster.patches == []


def test_a_node_claimed_by_an_owner_that_holds_no_slot_any_more_is_adopted() -> None:
    # Given a node annotated by another stack that writes in this budget, whose holder there has expired (its drain
    # died)
    cluster = FakeCluster(nodes={NODE: node(owner="stack-b", in_progress="{}")})
    slots = FakeSlots(writers=("stack-b",))

    # When this stack's lifecycle of the node takes a slot and cordons
    taken = acquire(cluster, slots)(terminating(Step.ACQUIRE_SLOT), T0)
    record = terminating(Step.CORDON, node=NODE, extra=taken.changes["extra"])
    cordoned = cordon(cluster)(record, T0)

    # Then it adopts the node: its own slot, its own annotations
    assert (taken.then, taken.again) == (None, False)
    assert slots.holders == {NODE}
    assert cordoned.then is None
    assert cluster.nodes[NODE].owner == "stack-a"


def test_a_waiter_whose_node_name_went_to_another_instance_takes_no_slot_for_that_node() -> None:
    # Given a terminating instance that waits for a slot for its node, by the node's name; meanwhile its node
    # went, and a new instance's node took the name (a recycled private IP: same DNS name, another provider id)
    cluster, slots = FakeCluster(nodes={NODE: node(instance_id="i-0ffffffffffffffff")}), FakeSlots()
    record = terminating(Step.ACQUIRE_SLOT, node=NODE, slot_waiting_since=T0)

    # When it asks again
    outcome = acquire(cluster, slots)(record, T0 + timedelta(seconds=30))

    # Then the other instance's node gets no slot from it: the instance's own node is looked for, and is gone
    assert slots.requests == []
    assert (outcome.then, outcome.changes["outcome"]) == (Step.COMPLETE, "node-not-found")


# -- CORDON -------------------------------------------------------------------------------------------------


def test_cordon_sets_owner_and_in_progress_with_the_cordon_in_one_patch() -> None:
    cluster = FakeCluster(nodes={NODE: node()})
    outcome = cordon(cluster)(terminating(Step.CORDON, node=NODE), T0)
    (patch,) = cluster.patches
    assert patch["owner"] == "stack-a"
    assert patch["cordon"] is True
    assert patch["lb"] is True
    assert json.loads(str(patch["in_progress"])) == {
        "instance": INSTANCE,
        "transition": "terminate",
        "token": "token",
        "started": T0.isoformat(),
        "cordon": True,  # what nodecycle set (the node was neither cordoned nor excluded before)
        "lb": True,
    }
    assert outcome.changes["extra"]["set_on_node"] == {"cordon": True, "lb": True}
    assert outcome.changes["drain_deadline"] == T0 + timedelta(seconds=600)


def test_a_cordon_is_told_on_the_node_by_its_uid_and_is_the_same_when_no_event_may_be_written() -> None:
    # Given a node, with its uid as every node has one
    told = FakeEvents()
    outcome = cordon(FakeCluster(nodes={NODE: node()}), events=told)(terminating(Step.CORDON, node=NODE), T0)

    # Then the cordon is told on the node by its uid (what `kubectl describe node` selects events by)
    assert (told.written, told.uids) == ([(NODE, "Cordoned", "Normal")], [node().uid])
    assert outcome.changes["node_uid"] == node().uid

    # When the API server refuses every event (a role without the rule), Then the cordon is the same, untold
    refused = FakeEvents(refused="events is forbidden")
    again = cordon(FakeCluster(nodes={NODE: node()}), events=refused)(terminating(Step.CORDON, node=NODE), T0)
    assert (again.then, again.changes) == (outcome.then, outcome.changes)
    assert refused.written == []


def test_a_node_in_progress_without_owner_is_adopted() -> None:
    cluster = FakeCluster(nodes={NODE: node(in_progress='{"instance":"i-0123456789abcdef0"}')})
    outcome = cordon(cluster)(terminating(Step.CORDON, node=NODE), T0)
    assert outcome.then is None
    assert cluster.nodes[NODE].owner == "stack-a"


def test_a_node_claimed_by_another_owner_meanwhile_is_not_touched() -> None:
    cluster = FakeCluster(nodes={NODE: node(owner="stack-b")})
    outcome = cordon(cluster)(terminating(Step.CORDON, node=NODE), T0)
    assert outcome.then is Step.COMPLETE
    assert cluster.patches == []


def test_a_node_whose_name_went_to_another_instance_is_not_cordoned() -> None:
    # Given a node name whose node went with its instance after the slot was taken, and a new instance's node
    # of the same name (a recycled private IP)
    cluster = FakeCluster(nodes={NODE: node(instance_id="i-0ffffffffffffffff")})

    # When the cordon comes
    outcome = cordon(cluster)(terminating(Step.CORDON, node=NODE), T0)

    # Then the new instance's node is left alone: the instance's node is gone
    assert cluster.patches == []
    assert (outcome.then, outcome.changes["outcome"]) == (Step.COMPLETE, "node-gone")


def test_a_cordon_asked_again_after_a_refusal_whose_slot_was_lost_waits_for_one_without_cordoning() -> None:
    # Given a drain whose cordon the API server refused at its last poll, and its budget slot lost since
    cluster = FakeCluster(nodes={NODE: node()})
    record = terminating(Step.CORDON, node=NODE, extra={CORDON_REFUSED: T0.isoformat()})
    metrics = FakeMetrics()

    # When the cordon is asked again
    outcome = cordon(cluster, slots=FakeSlots(lost=True), metrics=metrics)(record, T0 + timedelta(seconds=5))

    # Then the node is not touched: the lifecycle waits for a slot as any other
    assert cluster.patches == []
    assert (outcome.then, outcome.delay) == (Step.ACQUIRE_SLOT, policy().budget_retry_seconds)
    assert metrics.counts["BudgetSlotsLost"] == 1


def test_a_cordon_asked_again_whose_slot_renewal_is_refused_polls_on_and_settles_at_its_timeout() -> None:
    # Given a drain whose cordon the API server refused at its last poll, and RBAC refusing the budget since
    # (the budget ConfigMap's get or update forbidden)
    why = 'configmaps "nodecycle-budget" is forbidden: User "drain" cannot update resource "configmaps"'
    cluster = FakeCluster(nodes={NODE: node()})
    record = terminating(Step.CORDON, node=NODE, extra={CORDON_REFUSED: T0.isoformat()})
    slots = FakeSlots(holders={NODE}, refused=why)
    metrics = FakeMetrics()

    # When the cordon is asked again before its drain timeout, and at it
    before = cordon(cluster, slots=slots, metrics=metrics)(record, T0 + timedelta(seconds=5))
    at = cordon(cluster, slots=slots)(record, T0 + policy().timeout)

    # Then nothing is cordoned without its slot renewed: it polls on as a refused cordon does, an error an
    # operator sees, and at the drain timeout the drain is over rather than crashing every poll with its slot
    assert cluster.patches == []
    assert (before.again, before.delay) == (True, policy().poll_seconds)
    assert metrics.counts["EvictionErrors"] == 1
    assert (at.then, at.changes["outcome"]) == (Step.COMPLETE, "drain-timeout-cordon-refused")


def test_a_drain_whose_cordon_was_refused_before_it_lost_its_slot_gets_its_whole_timeout_once_back() -> None:
    # Given a drain whose cordon the API server refused, and whose slot was lost before the cordon was asked
    # again: it waits for a slot as any other
    cluster = FakeCluster(nodes={NODE: node()})
    refused = terminating(Step.CORDON, node=NODE, extra={CORDON_REFUSED: T0.isoformat()})
    lost = cordon(cluster, slots=FakeSlots(lost=True))(refused, T0 + timedelta(seconds=5))
    waiting = advance(refused, lost, T0 + timedelta(seconds=5))

    # When it gets a slot back long after (more than a drain timeout), and the cordon is accepted this time
    back = T0 + 2 * policy().timeout
    outcome = cordon(cluster)(waiting.model_copy(update={"step": Step.CORDON}), back)

    # Then the time it waited for a slot does not count against its drain (invariant 9): its timeout runs
    # from now, not from the refusal before the wait, which would force its pods at the next poll
    assert cluster.patches
    assert outcome.changes["drain_started_at"] == back
    assert outcome.changes["drain_deadline"] == back + policy().timeout


def test_a_cordon_whose_answer_was_lost_keeps_the_drains_time_from_when_the_node_was_cordoned() -> None:
    # Given a node this lifecycle's cordon reached at T0 (cordoned and annotated), whose answer was lost (the
    # connection closed after the API server served it): the step failed and is retried a few seconds later
    started = {"instance": INSTANCE, "transition": "terminate", "token": "token", "started": T0.isoformat()}
    record = terminating(Step.CORDON, node=NODE)
    claimed = node(owner=record.owner, in_progress=json.dumps(started), unschedulable=True)
    cluster = FakeCluster(nodes={NODE: claimed})

    # When the retry runs
    retry = T0 + timedelta(seconds=8)
    outcome = cordon(cluster)(record, retry)

    # Then the drain's time runs from the cordon that took effect, not from the retry: the node has been
    # cordoned, and the slot held for its drain, since T0 (invariant 10 bounds the slot from the cordon)
    assert outcome.changes["drain_started_at"] == T0
    assert outcome.changes["drain_deadline"] == T0 + policy().timeout


def test_a_node_that_changed_since_it_was_read_is_read_again() -> None:
    cluster = FakeCluster(nodes={NODE: node()}, conflicts=1)
    outcome = cordon(cluster)(terminating(Step.CORDON, node=NODE), T0)
    assert (outcome.again, outcome.delay) == (True, 1)


# -- EVICT --------------------------------------------------------------------------------------------------


def draining(**changes: object) -> LifecycleRecord:
    return terminating(
        Step.EVICT, node=NODE, drain_started_at=T0, drain_deadline=T0 + timedelta(seconds=600), **changes
    )


def polled(**changes: object) -> LifecycleRecord:
    """A drain that has asked its pods to leave once already."""
    return draining(extra={"polls": 1}, **changes)


def cleanup(
    cluster: Cluster,
    slots: FakeSlots,
    autoscaling: FakeAutoscaling | None = None,
    events: FakeEvents | None = None,
    ec2: Ec2Maintenance | None = None,
    *,
    metrics: FakeMetrics | None = None,
) -> Cleanup:
    """The CLEANUP step, its wake-ups to nowhere."""
    waker = Dispatcher(
        records=InMemoryRecords(), queues=RecordingQueues(), clock=FakeClock(T0), metrics=FakeMetrics()
    )
    return Cleanup(
        cluster=cluster,
        slots=slots,
        dispatcher=waker,
        autoscaling=autoscaling or FakeAutoscaling(),
        metrics=metrics or FakeMetrics(),
        events=events or FakeEvents(),
        instances=ec2 or Ec2Maintenance(),
    )


def evict(
    cluster: FakeCluster,
    slots: FakeSlots | None = None,
    metrics: FakeMetrics | None = None,
    events: FakeEvents | None = None,
    ec2: NoDns | None = None,
    **env: str,
) -> Evict:
    return Evict(
        cluster=cluster,
        slots=slots or FakeSlots(holders={NODE}),
        dispatcher=wakes_to_nowhere(),
        instances=ec2 or NoDns(known={INSTANCE: "running"}),
        policy=policy(**env),
        metrics=metrics or FakeMetrics(),
        events=events or FakeEvents(),
        time_left=no_end,
    )


def test_pods_are_evicted_with_their_grace_capped_and_daemonset_pods_stay() -> None:
    # Given a node with two workload pods (one with a long grace period) and a DaemonSet pod
    cluster = FakeCluster(
        nodes={NODE: node()},
        pods=[pod("web-1", grace_period=20), pod("web-2"), pod("logs", controller_kind="DaemonSet")],
    )
    metrics = FakeMetrics()

    # When the evict step runs
    outcome = evict(cluster, metrics=metrics)(draining(), T0)

    # Then the workload pods are evicted, their grace capped at 60 s, and the step polls again soon
    assert cluster.evictions == [("web-1", 20), ("web-2", 60)]
    assert (outcome.again, outcome.delay, outcome.changes["pods_evicted"]) == (True, 1, 2)
    assert metrics.counts["PodsEvicted"] == 2


def test_a_pod_the_drain_evicted_is_not_asked_again_as_its_deadline_nears_nor_by_the_force_policy() -> None:
    # Given a pod with a long grace of its own, evicted by a drain 100 s before its deadline (grace capped at 60 s)
    cluster = FakeCluster(nodes={NODE: node()}, pods=[pod("web-1", grace_period=300)])
    step = evict(cluster)
    record = draining().model_copy(update={"drain_deadline": T0 + timedelta(seconds=100)})
    record = record.model_copy(update=dict(step(record, T0).changes))

    # When the drain polls as its deadline nears (the grace it would give shrinks to the force grace), and at
    # its deadline, with the pod still stopping
    for later in (45, 90, 99, 100):
        record = record.model_copy(update=dict(step(record, T0 + timedelta(seconds=later)).changes))

    # Then the pod was asked once: its deletion ends within what the drain gives it (only a deletion someone
    # else asked with a longer grace is asked again)
    assert cluster.evictions == [("web-1", 60)]
    assert cluster.deletions == []
    assert record.forced_at == T0 + timedelta(seconds=100)


def test_a_pod_someone_deletes_with_a_longer_grace_is_asked_again_even_under_an_exhausted_budget() -> None:
    # Given a pod under a budget that allows no disruption, deleted by someone else with an hour's grace
    leaving = pod("web-1", deletion_at=T0 + timedelta(seconds=3600), deletion_grace=3600)
    cluster = FakeCluster(nodes={NODE: node()}, pods=[leaving], blocked={"web-1"})
    events = FakeEvents()

    # When the drain asks it to leave with the drain's grace (60 s, the cap)
    evict(cluster, events=events)(draining(), T0)

    # Then its deletion is shortened (a pod being deleted is evicted without its budget), and no blocked
    # eviction is told
    assert cluster.evictions == [("web-1", 60)]
    assert cluster.pods[0].deletion_at == T0 + timedelta(seconds=60)
    assert events.written == []


def test_a_pod_on_its_way_out_whose_eviction_is_refused_is_left_to_its_deletion_without_an_alarm() -> None:
    # Given a pod of a namespace being deleted: the namespace controller deletes it with its own grace (an
    # hour), and the API server refuses its eviction (403: no new content in a namespace being deleted)
    why = 'pods "web-1" is forbidden: unable to create new content in namespace apps because it is being terminated'
    leaving = pod("web-1", deletion_at=T0 + timedelta(seconds=3600), deletion_grace=3600)
    cluster = FakeCluster(nodes={NODE: node()}, pods=[leaving], refused={"web-1": why})
    metrics, events = FakeMetrics(), FakeEvents()

    # When the drain asks it to leave with the drain's grace
    outcome = evict(cluster, metrics=metrics, events=events)(draining(), T0)

    # Then the refusal raises no alarm and tells no event (nothing for an operator to fix: the pod is going), and
    # the drain polls on, its timeout policy deciding the rest
    assert outcome.again
    assert "EvictionErrors" not in metrics.counts
    assert events.written == []


def test_a_drain_refused_the_list_of_its_pods_polls_on_and_raises_the_alarm_telling_it_once() -> None:
    # Given a drain that RBAC refuses to list pods for a while (a ClusterRoleBinding edited, not yet restored)
    why = 'pods is forbidden: User "drain" cannot list resource "pods" in API group "" at the cluster scope'
    cluster = FakeCluster(nodes={NODE: node()}, pods=[pod("web-1")], pods_refused=why)
    metrics, events = FakeMetrics(), FakeEvents()
    step = evict(cluster, metrics=metrics, events=events)

    # When the evict step runs twice before its drain timeout
    outcome = step(polled(), T0 + timedelta(seconds=5))
    again = step(polled().model_copy(update=dict(outcome.changes)), T0 + timedelta(seconds=10))

    # Then it polls on (the refusal is an answer, not a crash to redeliver), the eviction errors' alarm counts
    # each refusal, and a Warning event on the node tells it once, with the API server's words
    assert outcome.again
    assert again.again
    assert outcome.delay == policy().poll_seconds
    assert metrics.counts["EvictionErrors"] == 2
    assert [(subject, reason) for subject, reason, _ in events.written] == [(NODE, "DrainReadRefused")]
    assert any(why in message for message in events.messages)


def test_a_drain_still_refused_the_list_of_its_pods_at_its_timeout_settles_by_its_policy() -> None:
    # Given a drain whose pods RBAC still refuses to list when its drain timeout comes
    why = 'pods is forbidden: User "drain" cannot list resource "pods" in API group "" at the cluster scope'
    cluster = FakeCluster(nodes={NODE: node()}, pods=[pod("web-1")], pods_refused=why)
    metrics = FakeMetrics()

    # When the evict step runs at the deadline
    outcome = evict(cluster, metrics=metrics)(polled(), T0 + timedelta(seconds=600))

    # Then the drain is over as one that could not finish (its slot is not held until the global timeout),
    # with an outcome that says why the action is completed with pods perhaps left
    assert (outcome.then, outcome.changes["outcome"]) == (Step.COMPLETE, "drain-timeout-reads-refused")
    assert metrics.counts["DrainTimeouts"] == 1
    assert cluster.evictions == []


def test_a_drain_refused_the_renewal_of_its_slot_evicts_nothing_and_settles_at_its_timeout() -> None:
    # Given a drain whose budget slot RBAC refuses to renew (the budget ConfigMap's get or update forbidden)
    why = 'configmaps "nodecycle-budget" is forbidden: User "drain" cannot get resource "configmaps"'
    cluster = FakeCluster(nodes={NODE: node()}, pods=[pod("web-1")])
    slots = FakeSlots(holders={NODE}, refused=why)

    # When the evict step polls before its timeout, and at it
    before = evict(cluster, slots=slots)(polled(), T0 + timedelta(seconds=5))
    at = evict(cluster, slots=slots)(polled(), T0 + timedelta(seconds=600))

    # Then nothing is evicted without the slot confirmed, and at the timeout the drain is over
    assert before.again
    assert cluster.evictions == []
    assert (at.then, at.changes["outcome"]) == (Step.COMPLETE, "drain-timeout-reads-refused")


def test_a_drain_paused_for_its_lost_slot_whose_renewal_is_refused_is_not_timed_out_for_the_pause() -> None:
    # Given a drain paused for its lost slot 100 s into its 600 s (waiting in line: not drain time), and RBAC
    # refusing the budget ConfigMap since, so that it cannot tell whether the slot is back
    why = 'configmaps "nodecycle-budget" is forbidden: User "drain" cannot get resource "configmaps"'
    cluster = FakeCluster(nodes={NODE: node()}, pods=[pod("web-1")])
    slots = FakeSlots(holders={NODE}, refused=why)
    paused = polled(drain_paused_at=T0 + timedelta(seconds=100))

    # When it polls past its deadline as it stood before the pause
    outcome = evict(cluster, slots=slots)(paused, T0 + timedelta(seconds=650))

    # Then it polls on: its drain had 100 s of its time when it paused, not 600 (invariant 9)
    assert outcome.again
    assert "outcome" not in outcome.changes
    assert cluster.evictions == []


def test_a_pod_whose_eviction_is_refused_does_not_stop_the_others_being_evicted() -> None:
    # Given a node whose first pod the API server will not evict (403: an admission webhook denies it), and a
    # second pod
    why = 'admission webhook "guard.example.com" denied the request: web-1 is pinned'
    cluster = FakeCluster(nodes={NODE: node()}, pods=[pod("web-1"), pod("web-2")], refused={"web-1": why})
    metrics, events = FakeMetrics(), FakeEvents()
    step = evict(cluster, metrics=metrics, events=events)

    # When the evict step runs twice
    outcome = step(draining(), T0)
    step(draining().model_copy(update=dict(outcome.changes)), T0 + timedelta(seconds=1))

    # Then the other pod is evicted, the step polls on (the drain's timeout policy decides the rest), and
    # the refusal is counted each time but told once, with the API server's words
    assert cluster.evictions == [("web-2", 60)]
    assert outcome.again
    assert metrics.counts["EvictionErrors"] == 2
    assert [(subject, reason) for subject, reason, _ in events.written] == [
        ("apps/web-1", "EvictionRefused"),
        (NODE, "EvictionRefused"),
    ]
    assert any(why in message for message in events.messages)


def test_a_throttled_eviction_ends_the_pass_and_the_other_pods_are_asked_at_the_next_poll() -> None:
    # Given three pods on the node, and an API server shedding load (API Priority and Fairness): it throttles
    # the next eviction, whichever pod it is of
    cluster = FakeCluster(nodes={NODE: node()}, pods=[pod("a"), pod("b"), pod("c")], shed=1)
    metrics = FakeMetrics()
    step = evict(cluster, metrics=metrics)

    # When the evict step runs
    first = step(draining(), T0)

    # Then the pass stops at the throttled answer: no other pod is asked while the server sheds load; the step
    # polls on, and the pass counts as the drain's first
    assert metrics.counts["EvictionsThrottled"] == 1
    assert cluster.evictions == []
    assert (first.again, first.changes["extra"]["polls"]) == (True, 1)

    # And at the next poll every pod is asked again
    step(draining().model_copy(update=dict(first.changes)), T0 + timedelta(seconds=1))
    assert sorted(name for name, _ in cluster.evictions) == ["a", "b", "c"]


def test_a_pod_whose_eviction_keeps_failing_stops_neither_the_others_nor_the_drain_timeout() -> None:
    # Given a node whose first pod's eviction fails again and again (a read timeout, a 504), and a second pod
    cluster = FakeCluster(
        nodes={NODE: node()}, pods=[pod("web-1"), pod("web-2")], failing={"web-1": "HTTP 504 Gateway Timeout"}
    )
    metrics = FakeMetrics()
    step = evict(cluster, metrics=metrics)

    # When the evict step runs
    first = step(draining(), T0)

    # Then the other pod is evicted and the step polls on, the failure counted as a retry of the step; the pass
    # counts as one that asked the pods to leave
    assert cluster.evictions == [("web-2", 60)]
    assert first.again
    assert first.changes["extra"]["polls"] == 1
    assert metrics.counts["StepRetries[step=evict]"] == 1

    # And at the drain timeout the policy applies to the pod that never left: it is deleted
    cluster.pods = [p for p in cluster.pods if p.name != "web-2"]
    cluster.failing.clear()
    late = T0 + timedelta(seconds=600)
    timed_out = step(draining().model_copy(update=dict(first.changes)), late)
    assert cluster.deletions == [("web-1", 5)]
    assert timed_out.changes["forced_at"] == late


def test_a_pass_asks_the_pods_that_failed_before_last_and_stops_after_two_failures() -> None:
    # Given three pods, the first two of which fail transiently (each failure may have cost a read timeout of
    # the step's minute)
    cluster = FakeCluster(
        nodes={NODE: node()},
        pods=[pod("a"), pod("b"), pod("c")],
        failing={"a": "read timed out", "b": "read timed out"},
    )
    metrics = FakeMetrics()
    step = evict(cluster, metrics=metrics)

    # When the step runs, Then the pass ends at the second failure
    first = step(draining(), T0)
    assert (cluster.evictions, metrics.counts["StepRetries[step=evict]"]) == ([], 2)

    # And the next pass asks the pod that has not failed first
    step(draining().model_copy(update=dict(first.changes)), T0 + timedelta(seconds=1))
    assert cluster.evictions == [("c", 60)]


def test_a_pod_that_failed_once_is_not_starved_by_pods_that_always_fail() -> None:
    # Given two pods whose calls always fail (a webhook that times out for their namespace), and a third
    # whose call fails once, at the second pass, and would succeed after that
    cluster = FakeCluster(
        nodes={NODE: node()},
        pods=[pod("a"), pod("b"), pod("z")],
        failing={"a": "HTTP 504 Gateway Timeout", "b": "HTTP 504"},
    )
    step = evict(cluster)
    record, now = draining(), T0
    for poll in range(6):
        if poll == 1:
            cluster.failing["z"] = "HTTP 502 Bad Gateway"
        elif poll == 2:
            del cluster.failing["z"]
        record = record.model_copy(update=dict(step(record, now).changes))
        now += timedelta(seconds=10)

    # Then it is asked again, before the pods that failed after it, and evicted
    assert ("z", 60) in cluster.evictions
    # and only the pods still failing are remembered
    assert sorted(PodNotes(record.extra).failure_order(["uid-a", "uid-b", "uid-z"])) == ["uid-a", "uid-b"]


def test_polls_start_quick_and_slow_down_to_the_configured_interval() -> None:
    # Given a pod that takes its time to stop
    cluster = FakeCluster(
        nodes={NODE: node()}, pods=[pod("slow", deletion_at=T0 + timedelta(seconds=30), deletion_grace=30)]
    )
    step = evict(cluster)
    record = draining()

    # When the step polls again and again
    delays = []
    for _ in range(5):
        outcome = step(record, T0)
        delays.append(outcome.delay)
        record = record.model_copy(update=dict(outcome.changes))

    # Then it looks after 1, 2, 4 s, then every 5 s (the setting): an empty node is noticed within seconds
    assert delays == [1, 2, 4, 5, 5]


def test_a_pod_protected_by_its_disruption_budget_is_retried_on_the_next_poll() -> None:
    cluster = FakeCluster(nodes={NODE: node()}, pods=[pod("db-0")], blocked={"db-0"})
    metrics = FakeMetrics()
    step = evict(cluster, metrics=metrics)
    assert step(draining(), T0).again
    assert step(draining(), T0 + timedelta(seconds=5)).again
    assert metrics.counts["EvictionsBlockedByPdb"] == 2
    cluster.blocked.clear()
    step(draining(), T0 + timedelta(seconds=10))
    assert cluster.evictions == [("db-0", 60)]


def test_the_drain_is_over_when_only_daemonset_and_mirror_pods_are_left() -> None:
    cluster = FakeCluster(
        nodes={NODE: node()}, pods=[pod("logs", controller_kind="DaemonSet"), pod("kube-proxy", mirror=True)]
    )
    metrics = FakeMetrics()
    outcome = evict(cluster, metrics=metrics)(draining(), T0 + timedelta(seconds=42))
    assert (outcome.then, outcome.again, outcome.delay) == (None, False, 0)
    assert outcome.changes["outcome"] == "drained"
    assert metrics.timings["DrainDuration"] == [42.0]


def test_the_load_balancer_delay_is_waited_in_pieces_that_keep_the_slot_renewed() -> None:
    # Given a 250 s load balancer delay and a 600 s holder TTL (renew at least every 200 s)
    cluster = FakeCluster(nodes={NODE: node()}, pods=[])
    slots = FakeSlots(holders={NODE})
    metrics = FakeMetrics()
    step = evict(
        cluster, slots, metrics, lb_deregistration_delay_seconds="250", budget_holder_ttl_seconds="600"
    )

    # When the node is found empty, then polled again after each wait
    first = step(draining(), T0)
    record = draining(extra=first.changes["extra"])
    second = step(record, T0 + timedelta(seconds=first.delay))
    last = step(record, T0 + timedelta(seconds=250))

    # Then it waits 200 s, then 50 s (renewing each time), and goes on once the delay is over
    assert [first.delay, second.delay] == [200, 50]
    assert [first.again, second.again] == [True, True]
    assert (last.again, last.then, last.changes["outcome"]) == (False, None, "drained")
    assert metrics.timings["DrainDuration"] == [0.0]  # measured once, when the node was found empty


def test_a_drain_that_lost_its_slot_pauses_without_evicting() -> None:
    cluster = FakeCluster(nodes={NODE: node()}, pods=[pod("web-1")])
    outcome = evict(cluster, FakeSlots(lost=True))(draining(), T0)
    assert outcome.again
    assert cluster.evictions == []


def slots_freed_meanwhile() -> FakeSlots:
    """The budget after someone removed the drain's holder (the stop of its instance, FORGET_NODE, or its
    expiry), with room: a renewal takes the slot back, REACQUIRED."""
    return FakeSlots()


def test_a_drain_whose_slot_the_stop_of_its_instance_freed_settles_without_evicting() -> None:
    # Given a drain whose instance was stopped outside the hooks (its kubelet gone with it: pods asked to go
    # would stay Terminating) and whose slot that stop freed
    cluster = FakeCluster(nodes={NODE: node()}, pods=[pod("web-1")])
    step = evict(cluster, slots_freed_meanwhile(), ec2=NoDns(known={INSTANCE: "stopped"}))

    # When it polls
    outcome = step(draining(), T0)

    # Then it settles at once, without asking a pod to go
    assert outcome.then is settle_step(draining())
    assert outcome.changes["outcome"] == "instance-down"
    assert cluster.evictions == []


def test_a_drain_whose_slot_was_freed_while_its_instance_runs_takes_it_back_and_goes_on() -> None:
    cluster = FakeCluster(nodes={NODE: node()}, pods=[pod("web-1")])
    outcome = evict(cluster, slots_freed_meanwhile(), ec2=NoDns(known={INSTANCE: "running"}))(draining(), T0)
    assert outcome.changes.get("outcome") != "instance-down"
    assert [name for name, _ in cluster.evictions] == ["web-1"]


def test_timeout_policy_continue_goes_on_with_the_pods_still_there() -> None:
    cluster = FakeCluster(nodes={NODE: node()}, pods=[pod("db-0")], blocked={"db-0"})
    metrics = FakeMetrics()
    outcome = evict(cluster, metrics=metrics, timeout_policy="continue")(
        polled(), T0 + timedelta(seconds=600)
    )
    assert (outcome.then, outcome.again) == (None, False)
    assert outcome.changes["outcome"] == "drain-timeout-continued"
    assert metrics.counts["DrainTimeouts"] == 1


def test_timeout_policy_force_deletes_the_remaining_pods_then_waits_for_them() -> None:
    # Given a drain stuck on a disruption budget past its timeout
    cluster = FakeCluster(nodes={NODE: node()}, pods=[pod("db-0")], blocked={"db-0"})
    metrics = FakeMetrics()
    step = evict(cluster, metrics=metrics)
    late = T0 + timedelta(seconds=600)

    # When the step runs, it deletes the pod with the force grace period, and waits
    first = step(polled(), late)
    assert cluster.deletions == [("db-0", 5)]
    assert first.again
    assert first.changes["forced_at"] == late

    # Then once the pod is gone, the drain ends, saying it was forced
    cluster.pods = []
    done = step(draining(forced_at=late), late + timedelta(seconds=5))
    assert done.changes["outcome"] == "drain-timeout-forced"
    assert metrics.counts["DrainTimeouts"] == 1


def test_a_forced_delete_that_keeps_failing_transiently_ends_the_drain_after_the_force_grace() -> None:
    # Given a drain stuck on disruption budgets past its timeout, where the deletion of the first of its two
    # pods fails again and again (a read timeout, a 503)
    late = T0 + timedelta(seconds=600)
    cluster = FakeCluster(
        nodes={NODE: node()},
        pods=[pod("db-0"), pod("db-1")],
        blocked={"db-0", "db-1"},
        failing={"db-0": "HTTP 503 Service Unavailable"},
        now=late,
    )
    step = evict(cluster)

    # When the force policy deletes them
    first = step(polled(), late)

    # Then the other pod is deleted, and the moment the force began is kept
    assert cluster.deletions == [("db-1", 5)]
    assert (first.again, first.changes["forced_at"]) == (True, late)
    record = polled().model_copy(update=dict(first.changes))
    assert step(record, late + timedelta(seconds=30)).changes["forced_at"] == late
    # and the failing pod holds the drain no longer than the force grace and its slack
    done = step(record, late + timedelta(seconds=66))
    assert done.changes["outcome"] == "drain-timeout-forced-incomplete"


@pytest.mark.parametrize("timeout_policy", ["force", "continue"])
def test_a_drain_whose_pods_cannot_be_listed_past_its_timeout_holds_its_slot_no_longer_than_the_policy_allows(
    timeout_policy: str,
) -> None:
    # Given a drain past its timeout whose every list of pods fails transiently (a read timeout, a 503 on lists
    # only), the node still readable and its slot still renewable
    late = T0 + timedelta(seconds=600)
    cluster = FakeCluster(nodes={NODE: node()}, pods=[pod("db-0")], pods_failing="HTTP 503", now=late)
    slots = FakeSlots(holders={NODE})
    step = evict(cluster, slots, timeout_policy=timeout_policy)

    # When the step runs every 5 s past the timeout (as it is retried, or polls), until it ends the drain
    record, outcome, renewed_at = polled(), None, []
    for seconds in range(0, 600, 5):
        now, asked = late + timedelta(seconds=seconds), len(slots.requests)
        try:
            outcome = step(record, now)
        except TransientError:  # (retried by the engine, as before)
            outcome = None
        renewed_at += [now] * (len(slots.requests) - asked)
        if outcome is not None:
            record = record.model_copy(update=dict(outcome.changes))
            if not outcome.again:
                break

    # Then the timeout policy ends the drain without its pods' list, the force policy after its grace and slack
    # (what it could not delete it could not list either), so the slot is renewed no longer than invariant 10
    # allows: not at every retry until the action's global timeout
    assert outcome is not None
    assert not outcome.again
    assert outcome.changes["outcome"] == "drain-timeout-unlisted"
    bound = late + (timedelta(seconds=5) + FORCED_POD_SLACK if timeout_policy == "force" else timedelta(0))
    assert renewed_at
    assert max(renewed_at) <= bound + timedelta(seconds=5)


def test_a_forced_delete_the_api_server_refuses_does_not_stop_the_others_being_deleted() -> None:
    # Given a drain stuck on disruption budgets past its timeout, where a webhook denies the deletion of the
    # first of its two pods (403)
    why = 'admission webhook "guard.example.com" denied the request: db-0 may not be deleted'
    late = T0 + timedelta(seconds=600)
    cluster = FakeCluster(
        nodes={NODE: node()},
        pods=[pod("db-0"), pod("db-1")],
        blocked={"db-0", "db-1"},
        undeletable={"db-0": why},
        now=late,
    )
    metrics, events = FakeMetrics(), FakeEvents()
    step = evict(cluster, metrics=metrics, events=events)

    # When the force policy deletes them, twice
    first = step(polled(), late)
    record = polled().model_copy(update=dict(first.changes))
    step(record, late + timedelta(seconds=5))

    # Then the other pod is deleted, the step waits on, and the refusal is counted each time (the eviction
    # errors' alarm: an operator must look) but told once, with the API server's words
    assert cluster.deletions == [("db-1", 5)]
    assert (first.again, first.changes["forced_at"]) == (True, late)
    assert metrics.counts["EvictionErrors"] == 2
    refusals = [(subject, reason) for subject, reason, _ in events.written if reason == "DeletionRefused"]
    assert refusals == [("apps/db-0", "DeletionRefused"), (NODE, "DeletionRefused")]
    assert any(why in message for message in events.messages)
    # And the drain ends once the force grace and its slack are over, the refused pod still there
    done = step(record, late + timedelta(seconds=66))
    assert done.changes["outcome"] == "drain-timeout-forced-incomplete"


def test_a_drain_that_starts_past_its_deadline_asks_its_pods_to_leave_before_forcing_anything() -> None:
    # Given a drain whose deadline has passed before its first look at the pods (it got its slot back late)
    cluster = FakeCluster(nodes={NODE: node()}, pods=[pod("web-1")])
    first = evict(cluster)(draining(), T0 + timedelta(seconds=900))
    # Then it evicts (PodDisruptionBudgets respected) rather than deleting at once, with the force grace
    assert (cluster.evictions, cluster.deletions) == ([("web-1", 5)], [])
    assert first.again


def test_a_pod_that_never_stops_after_a_forced_delete_does_not_hold_the_lifecycle_forever() -> None:
    # Given a Ready node whose last pod was force-deleted at the drain timeout and is still there a minute
    # past its deletion deadline (a finalizer nobody removes)
    late = T0 + timedelta(seconds=600)
    stuck = pod("stuck", deletion_at=late + timedelta(seconds=5), deletion_grace=5)
    cluster = FakeCluster(nodes={NODE: node()}, pods=[stuck])
    # When the drain looks again, Then it stops waiting for it, and says so
    outcome = evict(cluster)(draining(forced_at=late), late + timedelta(seconds=66))
    assert outcome.changes["outcome"] == (
        "drain-timeout-forced; 1 pods left terminating (past their deletion deadline)"
    )
    assert outcome.changes["extra"][STUCK_PODS]["pods"] == ["apps/stuck"]


def test_pods_of_a_node_whose_kubelet_is_gone_count_as_gone_once_asked_to_leave() -> None:
    # Given a node that went NotReady (its kubelet is gone: Ready Unknown): the pods the drain evicted stay
    # Terminating
    cluster = FakeCluster(
        nodes={NODE: node(ready=False, kubelet_lost=True)}, pods=[pod("web-1"), pod("web-2")]
    )
    metrics = FakeMetrics()
    step = evict(cluster, metrics=metrics)
    step(draining(), T0)
    assert len(cluster.evictions) == 2
    # When the drain looks again 20 s later (their 300 s grace is far from over, no drain timeout yet)
    outcome = step(draining(), T0 + timedelta(seconds=20))
    # Then it does not wait for them: nothing will ever stop them but the node's removal
    assert (outcome.then, outcome.again) == (None, False)
    assert outcome.changes["outcome"] == "drained; 2 pods left terminating (node not ready)"
    assert metrics.counts["PodsLeftTerminating"] == 2


def test_pods_of_a_node_its_kubelet_reports_not_ready_are_waited_for_until_past_their_deadline() -> None:
    # Given a node whose kubelet reports it NotReady (Ready=False: its runtime's network not ready), whose
    # evicted pods are stopping within their grace (60 s, the cap)
    cluster = FakeCluster(nodes={NODE: node(ready=False)}, pods=[pod("web-1")])
    step = evict(cluster)
    step(draining(), T0)
    # When the drain looks again 20 s later, Then it waits for them: the kubelet is there to stop them
    assert step(draining(), T0 + timedelta(seconds=20)).again
    # and when they are still there a minute past their deletion's deadline, it waits no longer
    outcome = step(draining(), T0 + timedelta(seconds=121))
    assert outcome.changes["outcome"] == "drained; 1 pods left terminating (past their deletion deadline)"


def test_force_deleted_pods_of_a_dead_node_count_as_gone_once_their_grace_is_over() -> None:
    # Given a drain that force-deleted its last pods at its timeout (grace 5 s), on a node whose kubelet is
    # gone: the pods stay Terminating, and no kubelet will ever stop them
    late = T0 + timedelta(seconds=600)
    deleted = {"deletion_at": late + timedelta(seconds=5), "deletion_grace": 5}
    cluster = FakeCluster(
        nodes={NODE: node(ready=False, kubelet_lost=True)},
        pods=[pod("web-1", **deleted), pod("web-2", **deleted)],
    )
    # When the drain looks again 7 s after the forced delete (their grace over, a healthy kubelet would have
    # stopped them by now)
    outcome = evict(cluster)(draining(forced_at=late), late + timedelta(seconds=7))
    # Then it looks at the node and does not wait for them: the slot is not held for nothing
    assert (outcome.then, outcome.again) == (None, False)
    assert outcome.changes["outcome"] == "drain-timeout-forced; 2 pods left terminating (node not ready)"


def test_a_ready_node_whose_pods_take_their_grace_period_is_waited_for() -> None:
    # Given a healthy node whose evicted pods are shutting down within their grace
    cluster = FakeCluster(nodes={NODE: node()}, pods=[pod("web-1")])
    step = evict(cluster)
    step(draining(), T0)
    # When the drain looks again 20 s later, Then it keeps waiting (the node was checked: Ready)
    assert step(draining(), T0 + timedelta(seconds=20)).again
    # and a pod deleted only now is waited for, whatever the node's readiness says
    quick = FakeCluster(
        nodes={NODE: node(ready=False, kubelet_lost=True)},
        pods=[pod("web-3", deletion_at=T0 + timedelta(seconds=30), deletion_grace=30)],
    )
    assert evict(quick)(draining(), T0 + timedelta(seconds=1)).again


def test_time_spent_waiting_for_a_lost_slot_is_not_drain_time() -> None:
    # Given a drain that lost its budget slot 100 s into its 600 s drain timeout
    cluster = FakeCluster(nodes={NODE: node()}, pods=[pod("db-0")], blocked={"db-0"})
    slots = FakeSlots(holders={NODE}, lost=True)
    paused = evict(cluster, slots)(draining(), T0 + timedelta(seconds=100))
    assert paused.changes["drain_paused_at"] == T0 + timedelta(seconds=100)
    # When it gets the slot back 900 s later (past its original deadline)
    slots.lost = False
    record = draining(drain_paused_at=T0 + timedelta(seconds=100))
    resumed = evict(cluster, slots)(record, T0 + timedelta(seconds=1000))
    # Then it goes on evicting, with a deadline moved on by the 900 s it waited, and forces nothing
    assert resumed.again
    assert resumed.changes["drain_deadline"] == T0 + timedelta(seconds=1500)
    assert resumed.changes["drain_paused_at"] is None
    assert cluster.deletions == []


# -- CLEANUP ------------------------------------------------------------------------------------------------


def test_cleanup_clears_our_annotations_releases_the_slot_and_wakes_the_next_waiter() -> None:
    # Given our drained node holding the budget's one slot, and two other lifecycles waiting for it
    cluster = FakeCluster(nodes={NODE: node(owner="stack-a", in_progress="{}")})
    records, queues = InMemoryRecords(), RecordingQueues()
    waiter = terminating(
        Step.ACQUIRE_SLOT, id="i-0aaaaaaaaaaaaaaaa/terminate/t2", seq=4, slot_waiting_since=T0
    )
    behind = terminating(
        Step.ACQUIRE_SLOT, id="i-0cccccccccccccccc/terminate/t3", seq=2, slot_waiting_since=T0
    )
    records.create(waiter)
    records.create(behind)
    slots = FakeSlots(holders={NODE}, waiters=[waiter.id, behind.id])
    metrics = FakeMetrics()

    # When cleanup runs
    step = Cleanup(
        cluster=cluster,
        slots=slots,
        dispatcher=Dispatcher(records=records, queues=queues, clock=FakeClock(T0), metrics=metrics),
        autoscaling=FakeAutoscaling(),
        metrics=FakeMetrics(),
        events=FakeEvents(),
        instances=Ec2Maintenance(),
    )
    outcome = step(terminating(Step.CLEANUP, node=NODE), T0)

    # Then both annotations go in one patch, the slot is released and passed on to the first waiter, which
    # gets a message right away; the one behind it, with no slot to take, gets none
    assert outcome.then is None
    # (the node of an instance that goes stays cordoned, marked released for the lifecycle: out of a percent)
    released_for = terminating(Step.CLEANUP).id
    assert cluster.patches == [{"owner": None, "in_progress": None, "released_for": released_for}]
    assert slots.released == [NODE]
    assert (set(slots.held_for.values()), slots.waiting) == ({waiter.id}, [behind.id])
    (sent,) = queues.take()
    assert (sent.worker, sent.message.record_id, sent.message.seq, sent.delay) == (
        Worker.WAKE,
        waiter.id,
        4,
        0,
    )
    assert metrics.counts["WaitersWoken"] == 1


@pytest.mark.parametrize("pool", ["Warmed:Pending", "Warmed:Pending:Wait"])
def test_a_node_going_into_a_warm_pool_keeps_its_cordon_until_its_kubelet_is_gone(pool: str) -> None:
    # Given our drained node, cordoned, whose terminate action into the warm pool is complete: Auto Scaling
    # stops the instance only now, and the node stays Ready a minute after that
    cluster = FakeCluster(nodes={NODE: node(owner="stack-a", in_progress="{}")}, cordoned={NODE})
    autoscaling = FakeAutoscaling(states={INSTANCE: pool})
    slots = FakeSlots(holders={NODE})
    step = cleanup(cluster, slots, autoscaling)
    record = terminating(Step.CLEANUP, node=NODE, destination="WarmPool")

    # When cleanup runs
    first = step(record, T0)

    # Then the annotations go and the slot is given back at once, but the cordon stays, the node marked as
    # released for this lifecycle: the pods just evicted from it must not come back to an instance that stops
    assert cluster.patches == [{"owner": None, "in_progress": None, "released_for": record.id}]
    assert (cluster.cordoned, slots.released) == ({NODE}, [NODE])
    assert first.delay == POOL_POLL_SECONDS

    # When it looks again while the node is still Ready, then once the stopped kubelet's node is NotReady
    watching = record.model_copy(update=first.changes)
    again = step(watching, T0 + timedelta(seconds=10))
    assert (again.delay, cluster.cordoned, len(cluster.patches)) == (POOL_POLL_SECONDS, {NODE}, 1)
    autoscaling.states[INSTANCE] = "Warmed:Stopped"
    cluster.nodes[NODE] = cluster.nodes[NODE].model_copy(update={"ready": False})
    lifted = step(watching, T0 + timedelta(seconds=60))

    # Then the cordon and the load balancer exclusion are lifted (the node controller's taint keeps pods off
    # until it is back), the mark removed, and nothing else is released again
    assert lifted.then is None
    assert cluster.patches[-1] == {"owner": None, "in_progress": None, "cordon": False, "lb": False}
    assert (cluster.cordoned, cluster.nodes[NODE].released_for, slots.released) == (set(), None, [NODE])


def test_a_node_back_from_the_warm_pool_before_its_kubelet_was_missed_is_uncordoned_once_its_kubelet_runs() -> (
    None
):
    # Given our node kept cordoned for an instance stopped into the warm pool, its kubelet's last Lease renewal
    # before the stop
    cluster = FakeCluster(nodes={NODE: node(owner="stack-a", in_progress="{}")}, cordoned={NODE})
    cluster.leases[NODE] = T0 - timedelta(seconds=3)
    autoscaling = FakeAutoscaling(states={INSTANCE: "Warmed:Pending"})
    step = cleanup(cluster, FakeSlots(holders={NODE}), autoscaling)
    record = terminating(Step.CLEANUP, node=NODE, destination="WarmPool")
    watching = record.model_copy(update=step(record, T0).changes)

    # When the instance is taken out of the pool again (a scale-out) while its node still looks Ready, as the
    # kubelet left it before the stop (the node monitor's grace not over), the instance not started yet
    autoscaling.states[INSTANCE] = "Pending:Wait"
    asleep = step(watching, T0 + timedelta(seconds=30))
    watching = watching.model_copy(update=asleep.changes)
    still = step(watching, T0 + timedelta(seconds=40))

    # Then it stays cordoned, looked at again soon
    assert (asleep.delay, still.delay) == (POOL_POLL_SECONDS, POOL_POLL_SECONDS)
    assert cluster.cordoned == {NODE}

    # and once its kubelet runs again (its Lease renewed), its node is schedulable again
    cluster.leases[NODE] = T0 + timedelta(seconds=45)
    assert step(watching, T0 + timedelta(seconds=50)).then is None
    assert cluster.cordoned == set()


@pytest.mark.parametrize("pool", ["Warmed:Hibernated", "Warmed:Stopped"])
def test_a_node_resumed_out_of_a_stopped_pool_is_uncordoned_on_a_lease_renewed_after_the_instance_slept(
    pool: str,
) -> None:
    # Given our node kept cordoned for an instance stopped (or hibernated) in its pool, its node still Ready (the
    # node monitor's grace not over), seen so by the watch at T0 + 10 s
    cluster = FakeCluster(nodes={NODE: node(owner="stack-a", in_progress="{}")}, cordoned={NODE})
    cluster.leases[NODE] = T0 - timedelta(seconds=2)
    autoscaling = FakeAutoscaling(states={INSTANCE: pool})
    step = cleanup(cluster, FakeSlots(holders={NODE}), autoscaling)
    record = terminating(Step.CLEANUP, node=NODE, destination="WarmPool")
    watching = record.model_copy(update=step(record, T0).changes)
    looked = step(watching, T0 + timedelta(seconds=10))
    assert (looked.delay, cluster.cordoned) == (POOL_POLL_SECONDS, {NODE})
    watching = watching.model_copy(update=looked.changes)

    # When the instance leaves the pool, its Lease renewed by a kubelet's clock 4 s ahead within what the clocks
    # may differ by after that look (the renewal from before the stop, maybe): kept
    autoscaling.states[INSTANCE] = "Pending"
    cluster.leases[NODE] = T0 + timedelta(seconds=14)
    kept = step(watching, T0 + timedelta(seconds=20))
    assert (kept.delay, cluster.cordoned) == (POOL_POLL_SECONDS, {NODE})

    # Then a renewal stamped later than that, the instance running again, lifts it at the next look
    cluster.leases[NODE] = T0 + timedelta(seconds=16)
    assert step(watching, T0 + timedelta(seconds=20)).then is None
    assert cluster.cordoned == set()


def test_a_node_out_of_the_warm_pool_whose_lease_may_not_be_read_is_uncordoned_on_its_ready_alone() -> None:
    # Given our node kept cordoned for an instance stopped in its pool, and an RBAC from before the Lease rule
    cluster = FakeCluster(nodes={NODE: node(owner="stack-a", in_progress="{}")}, cordoned={NODE})
    cluster.leases_refused = "leases is forbidden"
    autoscaling = FakeAutoscaling(states={INSTANCE: "Warmed:Stopped"})
    step = cleanup(cluster, FakeSlots(holders={NODE}), autoscaling)
    record = terminating(Step.CLEANUP, node=NODE, destination="WarmPool")
    watching = record.model_copy(update=step(record, T0).changes)

    # When the instance leaves the pool, its node Ready
    autoscaling.states[INSTANCE] = "Pending:Wait"

    # Then its Ready alone tells, as before the rule (no cordon kept for ever)
    assert step(watching, T0 + timedelta(seconds=10)).then is None
    assert cluster.cordoned == set()


def test_a_node_leaving_a_running_pool_is_uncordoned_at_once() -> None:
    # Given our node kept cordoned for an instance that waits in a Running pool (its kubelet never stopped), its
    # Lease renewed last before the watch's look
    cluster = FakeCluster(nodes={NODE: node(owner="stack-a", in_progress="{}")}, cordoned={NODE})
    cluster.leases[NODE] = T0 - timedelta(seconds=8)
    autoscaling = FakeAutoscaling(states={INSTANCE: "Warmed:Running"})
    step = cleanup(cluster, FakeSlots(holders={NODE}), autoscaling)
    record = terminating(Step.CLEANUP, node=NODE, destination="WarmPool")
    watching = record.model_copy(update=step(record, T0).changes)

    # When a scale-out takes it out of the pool
    autoscaling.states[INSTANCE] = "Pending:Wait"

    # Then its node is schedulable at that look
    assert step(watching, T0 + timedelta(seconds=10)).then is None
    assert cluster.cordoned == set()


def test_a_node_waiting_in_a_running_warm_pool_stays_cordoned_until_it_leaves_the_pool() -> None:
    # Given our node kept cordoned for an instance that waits in a warm pool whose instances keep running
    cluster = FakeCluster(nodes={NODE: node(owner="stack-a", in_progress="{}")}, cordoned={NODE})
    events = FakeEvents()
    autoscaling = FakeAutoscaling(states={INSTANCE: "Warmed:Running"})
    step = cleanup(cluster, FakeSlots(holders={NODE}), autoscaling, events)
    record = terminating(Step.CLEANUP, node=NODE, destination="WarmPool")
    watching = record.model_copy(update=step(record, T0).changes)

    # When its node is still Ready after the first watch, and for hours after it
    later = T0 + timedelta(seconds=POOL_WATCH_SECONDS)
    idle = step(watching, later)
    watching = watching.model_copy(update=idle.changes)
    again = step(watching, later + timedelta(hours=3))

    # Then it stays cordoned (no pod runs on an instance out of service), looked at once a minute, and an
    # Event tells the operator so, once
    assert (idle.delay, again.delay) == (POOL_IDLE_POLL_SECONDS, POOL_IDLE_POLL_SECONDS)
    assert cluster.cordoned == {NODE}
    assert [reason for _, reason, _ in events.written].count("CordonKeptInWarmPool") == 1

    # and when a scale-out takes it out of the pool, its node is uncordoned at the next look
    autoscaling.states[INSTANCE] = "Pending:Wait"
    assert step(watching, later + timedelta(hours=3, minutes=1)).then is None
    assert cluster.cordoned == set()


@pytest.mark.parametrize("state", ["Warmed:Running", "Warmed:Pending:Proceed"])
def test_a_node_in_the_warm_pool_whose_kubelet_is_gone_while_its_instance_runs_stays_cordoned(
    state: str,
) -> None:
    # Given our node kept cordoned for an instance that waits in a warm pool running (or is on its way there, not
    # stopped yet)
    cluster = FakeCluster(nodes={NODE: node(owner="stack-a", in_progress="{}")}, cordoned={NODE})
    autoscaling = FakeAutoscaling(states={INSTANCE: state})
    step = cleanup(cluster, FakeSlots(holders={NODE}), autoscaling)
    record = terminating(Step.CLEANUP, node=NODE, destination="WarmPool")
    watching = record.model_copy(update=step(record, T0).changes)

    # When its node is NotReady: its kubelet restarted, its runtime hung, its network cut, the instance running
    cluster.nodes[NODE] = cluster.nodes[NODE].model_copy(update={"ready": False})
    looked = step(watching, T0 + timedelta(seconds=60))

    # Then it stays cordoned and marked, the watch going on: that kubelet may be back while the instance is out of
    # service, its node Ready and schedulable (a stopped instance's is back only once it leaves the pool)
    assert (looked.again, looked.delay) == (True, POOL_POLL_SECONDS)
    assert (cluster.cordoned, cluster.nodes[NODE].released_for) == ({NODE}, record.id)

    # and once the instance is stopped in its pool, its node NotReady, the cordon is lifted
    autoscaling.states[INSTANCE] = "Warmed:Hibernated"
    lifted = step(watching.model_copy(update=looked.changes), T0 + timedelta(seconds=70))
    assert (lifted.then, lifted.again) == (None, False)
    assert (cluster.cordoned, cluster.nodes[NODE].released_for) == (set(), None)


def test_a_node_whose_instance_is_terminated_from_the_warm_pool_stays_cordoned() -> None:
    # Given our node kept cordoned for an instance waiting in a running warm pool
    cluster = FakeCluster(nodes={NODE: node(owner="stack-a", in_progress="{}")}, cordoned={NODE})
    autoscaling = FakeAutoscaling(states={INSTANCE: "Warmed:Running"})
    step = cleanup(cluster, FakeSlots(holders={NODE}), autoscaling)
    record = terminating(Step.CLEANUP, node=NODE, destination="WarmPool")
    watching = record.model_copy(update=step(record, T0).changes)

    # When the pool shrinks and the instance is terminated from it (no group has it any more), its node still
    # Ready until its kubelet is missed
    del autoscaling.states[INSTANCE]
    done = step(watching, T0 + timedelta(minutes=20))

    # Then the watch ends with the node cordoned: it is not coming back, and no pod is sent to it meanwhile
    assert done.then is None
    assert cluster.cordoned == {NODE}


@pytest.mark.parametrize("first", [Step.FORGET_NODE, Step.CLEANUP])
def test_a_node_stopped_into_the_warm_pool_comes_back_uncordoned_whichever_step_runs_first(
    first: Step,
) -> None:
    # Given our cordoned, drained node, whose instance's terminate action (into the warm pool) is complete
    progress = json.dumps({"instance": INSTANCE, "transition": "terminate", "token": "token"})
    cluster = FakeCluster(nodes={NODE: node(owner="stack-a", in_progress=progress)}, cordoned={NODE})
    drained = terminating(Step.CLEANUP, node=NODE, destination="WarmPool", drain_started_at=T0)
    slots = FakeSlots(holders={NODE}, held_for={NODE: drained.id})
    waker = Dispatcher(
        records=InMemoryRecords(), queues=RecordingQueues(), clock=FakeClock(T0), metrics=FakeMetrics()
    )
    cleanup = Cleanup(
        cluster=cluster,
        slots=slots,
        dispatcher=waker,
        autoscaling=FakeAutoscaling(states={INSTANCE: "Warmed:Stopped"}),
        metrics=FakeMetrics(),
        events=FakeEvents(),
        instances=Ec2Maintenance(),
    )
    # and Auto Scaling stopping the instance: its state change frees what nodecycle held for it
    stopped = spot(Step.FORGET_NODE, transition=Transition.STATE_CHANGE, id=f"{INSTANCE}/state-change")
    forget = ForgetNode(
        finder=NodeFinder(cluster, NoDns()),
        cluster=cluster,
        slots=slots,
        dispatcher=waker,
        instances=NoDns(),
        policy=policy(),
    )

    # When the state change's step and the drain's cleanup run, in either order, and the cleanup looks again
    # once the stopped kubelet's node is NotReady
    runs: list[tuple[StepHandler, LifecycleRecord]] = [(forget, stopped), (cleanup, drained)]
    outcomes = {
        record.id: step(record, T0) for step, record in (runs if first is Step.FORGET_NODE else runs[::-1])
    }
    assert cluster.cordoned == {NODE}
    cluster.nodes[NODE] = cluster.nodes[NODE].model_copy(update={"ready": False})
    cleanup(drained.model_copy(update=outcomes[drained.id].changes), T0 + timedelta(seconds=50))

    # Then the node comes back from the warm pool uncordoned, its annotations cleared
    assert cluster.cordoned == set()
    assert (cluster.nodes[NODE].owner, cluster.nodes[NODE].in_progress) == (None, None)


def test_a_cleanup_into_the_warm_pool_leaves_alone_a_cordon_on_another_instances_node_of_the_name() -> None:
    # Given the node name of an instance stopped into the warm pool, taken by another instance's node that
    # someone cordoned (a recycled private IP: no annotations of ours, another provider id)
    cluster = FakeCluster(nodes={NODE: node(instance_id="i-0ffffffffffffffff")}, cordoned={NODE})
    waker = Dispatcher(
        records=InMemoryRecords(), queues=RecordingQueues(), clock=FakeClock(T0), metrics=FakeMetrics()
    )
    record = terminating(Step.CLEANUP, node=NODE, destination="WarmPool", drain_started_at=T0)

    # When the stopped instance's cleanup runs
    Cleanup(
        cluster=cluster,
        slots=FakeSlots(),
        dispatcher=waker,
        autoscaling=FakeAutoscaling(),
        metrics=FakeMetrics(),
        events=FakeEvents(),
        instances=Ec2Maintenance(),
    )(record, T0)

    # Then that cordon is not its to lift
    assert (cluster.patches, cluster.cordoned) == ([], {NODE})


def test_a_late_cleanup_leaves_a_newer_lifecycle_of_the_same_node_name_alone() -> None:
    # Given a node name reused by a new instance (a recycled private IP): the new lifecycle holds the slot of
    # the name and annotated the node, when the cleanup of the old lifecycle comes late
    old = terminating(Step.CLEANUP, node=NODE)
    new_progress = json.dumps({"instance": "i-0bbbbbbbbbbbbbbbb", "transition": "terminate", "token": "t9"})
    cluster = FakeCluster(nodes={NODE: node(owner="stack-a", in_progress=new_progress)})
    slots = FakeSlots(holders={NODE}, held_for={NODE: "i-0bbbbbbbbbbbbbbbb/terminate/t9"})
    waker = Dispatcher(
        records=InMemoryRecords(), queues=RecordingQueues(), clock=FakeClock(T0), metrics=FakeMetrics()
    )

    # When the old lifecycle's cleanup runs
    Cleanup(
        cluster=cluster,
        slots=slots,
        dispatcher=waker,
        autoscaling=FakeAutoscaling(),
        metrics=FakeMetrics(),
        events=FakeEvents(),
        instances=Ec2Maintenance(),
    )(old, T0)

    # Then the new lifecycle keeps both its annotations and its slot
    assert cluster.patches == []
    assert slots.holders == {NODE}
    assert slots.released == []


@pytest.mark.parametrize(("state", "uncordoned"), [("InService", True), ("Terminating:Proceed", False)])
@pytest.mark.parametrize("gone", ["expired before the completion", "refused at the completion"])
def test_a_node_whose_action_turned_out_gone_is_uncordoned_if_its_instance_stays(
    state: str, uncordoned: bool, gone: str
) -> None:
    # Given our cordoned node, whose action Auto Scaling no longer had when the drain came to complete it
    # (found by a heartbeat, or told by the completion itself: "no active lifecycle action")
    cluster = FakeCluster(nodes={NODE: node(owner="stack-a", in_progress="{}")})
    autoscaling = FakeAutoscaling(states={INSTANCE: state})
    waker = Dispatcher(
        records=InMemoryRecords(), queues=RecordingQueues(), clock=FakeClock(T0), metrics=FakeMetrics()
    )
    if gone == "expired before the completion":
        record = terminating(Step.CLEANUP, node=NODE, outcome="action-expired")
    else:
        autoscaling.active = False
        done = CompleteAction(autoscaling, FakeMetrics())(terminating(Step.COMPLETE, node=NODE), T0)
        record = terminating(Step.CLEANUP, node=NODE, **done.changes)
    # When cleanup runs
    Cleanup(
        cluster=cluster,
        slots=FakeSlots(holders={NODE}),
        dispatcher=waker,
        autoscaling=autoscaling,
        metrics=FakeMetrics(),
        events=FakeEvents(),
        instances=Ec2Maintenance(),
    )(record, T0)
    # Then the node is uncordoned only if its instance is still in service (it is not going away)
    # (one that goes stays cordoned, marked released for the lifecycle: out of a percent's nodes)
    after = {"cordon": False, "lb": False} if uncordoned else {"released_for": record.id}
    expected = {"owner": None, "in_progress": None, **after}
    assert cluster.patches == [expected]


def test_cleanup_never_clears_the_annotations_of_another_owner() -> None:
    cluster = FakeCluster(nodes={NODE: node(owner="stack-b", in_progress="{}")})
    waker = Dispatcher(
        records=InMemoryRecords(), queues=RecordingQueues(), clock=FakeClock(T0), metrics=FakeMetrics()
    )
    step = Cleanup(
        cluster=cluster,
        slots=FakeSlots(),
        dispatcher=waker,
        autoscaling=FakeAutoscaling(),
        metrics=FakeMetrics(),
        events=FakeEvents(),
        instances=Ec2Maintenance(),
    )
    step(terminating(Step.CLEANUP, node=NODE), T0)
    assert cluster.patches == []


# -- READY_GATE ---------------------------------------------------------------------------------------------


def launching(**changes: object) -> LifecycleRecord:
    record = make_record((Step.READY_GATE, Step.COMPLETE, Step.DONE), transition=Transition.LAUNCHING)
    return record.model_copy(update={"instance_id": INSTANCE, **changes})


@pytest.mark.parametrize("ready", [True, False])
def test_the_gate_opens_only_for_a_ready_node(ready: bool) -> None:
    cluster = FakeCluster(nodes={NODE: node(ready=ready)})
    gate = ReadinessGate(
        finder=NodeFinder(cluster, Dns()),
        cluster=cluster,
        instances=Dns(),
        autoscaling=LaunchingGroup(),
        dispatcher=wakes_to_nowhere(),
        policy=readiness(),
        metrics=FakeMetrics(),
        events=FakeEvents(),
    )
    outcome = gate(launching(), T0)
    assert outcome.again is not ready
    if not ready:
        assert outcome.changes["gate_deadline"] == T0 + timedelta(seconds=300)


def test_the_gate_gives_up_with_the_configured_result_when_the_node_never_joins() -> None:
    metrics = FakeMetrics()
    cluster = FakeCluster()
    gate = ReadinessGate(
        finder=NodeFinder(cluster, NoDns()),
        cluster=cluster,
        instances=NoDns(),
        autoscaling=LaunchingGroup(),
        dispatcher=wakes_to_nowhere(),
        policy=readiness(readiness_failure_result="CONTINUE"),
        metrics=metrics,
        events=FakeEvents(),
    )
    deadline = T0 + timedelta(seconds=300)
    outcome = gate(launching(gate_deadline=deadline), deadline)
    assert outcome.then is Step.COMPLETE
    assert outcome.changes["result"] is ActionResult.CONTINUE
    assert outcome.changes["outcome"] == "node-never-joined"
    assert metrics.counts["ReadinessTimeouts"] == 1


# -- disruptions without a hook -------------------------------------------------------------------------


def spot(step: Step, **changes: object) -> LifecycleRecord:
    """A Spot interruption warned of at T0: the instance goes at T0 + 2 minutes."""
    plan = (Step.ACQUIRE_SLOT, Step.CORDON, Step.EVICT, Step.CLEANUP, Step.DONE)
    strikes = T0 + timedelta(minutes=2)
    record = make_record(
        plan,
        step,
        id=f"{INSTANCE}/spot-interruption",
        instance_id=INSTANCE,
        transition=Transition.SPOT_INTERRUPTION,
        hook="",
        heartbeat_timeout=0,
        heartbeat_deadline=strikes,
        global_deadline=strikes,
    )
    return record.model_copy(update=changes)


def test_a_spot_interruption_takes_a_slot_even_when_the_budget_is_full() -> None:
    cluster, slots = FakeCluster(nodes={NODE: node()}), FakeSlots(room=1, holders={"other-node"})
    outcome = acquire(cluster, slots)(spot(Step.ACQUIRE_SLOT), T0 + timedelta(seconds=1))
    (asked,) = slots.requests
    assert asked.force
    assert (outcome.then, outcome.again) == (None, False)


def test_a_spot_drain_ends_before_the_interruption_and_no_grace_reaches_past_it() -> None:
    # Given the cordon 20 s after the warning
    cluster = FakeCluster(nodes={NODE: node()}, pods=[pod("web-1")])
    cordoned = cordon(cluster)(spot(Step.CORDON, node=NODE), T0 + timedelta(seconds=20))
    deadline = cordoned.changes["drain_deadline"]
    assert deadline == T0 + timedelta(minutes=2) - timedelta(seconds=10)
    # When the pods are evicted 30 s after the warning, Then their grace fits in the 80 s left
    record = spot(Step.EVICT, node=NODE, drain_started_at=T0, drain_deadline=deadline)
    evict(cluster)(record, T0 + timedelta(seconds=30))
    assert cluster.evictions == [("web-1", 60)]  # the 60 s cap is shorter than the 80 s left
    fresh = FakeCluster(nodes={NODE: node()}, pods=[pod("web-2")])
    evict(fresh)(record, T0 + timedelta(seconds=90))
    assert fresh.evictions == [("web-2", 20)]  # 20 s left: no more


def acquire_after(
    records: InMemoryRecords, cluster: FakeCluster | None = None, slots: FakeSlots | None = None
) -> AcquireSlot:
    """The first step of a lifecycle, where ``records`` may hold another lifecycle's drain of the instance (no
    slot free unless ``slots`` says otherwise)."""
    cluster = cluster or FakeCluster()
    return AcquireSlot(
        finder=NodeFinder(cluster, NoDns()),
        cluster=cluster,
        slots=slots or FakeSlots(room=0),
        dispatcher=wakes_to_nowhere(),
        policy=policy(),
        metrics=FakeMetrics(),
        events=FakeEvents(),
        records=records,
    )


def test_a_terminate_hook_after_a_drained_spot_interruption_completes_at_once() -> None:
    # Given the Spot interruption's drain of the instance, over
    records = InMemoryRecords()
    drained = spot(Step.DONE, node=NODE, zone="eu-west-1a", drain_started_at=T0, outcome="drained")
    records.create(drained)
    step = acquire_after(records)
    # When Auto Scaling's terminate hook for the same instance comes
    outcome = step(terminating(Step.ACQUIRE_SLOT), T0 + timedelta(minutes=2))
    # Then it goes straight to its completion: the node is drained already
    assert outcome.then is Step.COMPLETE
    assert outcome.changes["outcome"] == "drained-by:spot-interruption"
    # and while that drain still runs, it waits for it
    records.commit(drained.model_copy(update={"step": Step.EVICT}), expected_seq=drained.seq)
    assert step(terminating(Step.ACQUIRE_SLOT), T0 + timedelta(seconds=60)).again


def test_a_terminate_hook_after_a_drained_spot_interruption_drains_again_when_it_may_not_list_the_pods() -> (
    None
):
    # Given the Spot interruption's drain of the instance, over, and RBAC refusing the list of pods for a while
    records = InMemoryRecords()
    records.create(spot(Step.DONE, node=NODE, zone="eu-west-1a", drain_started_at=T0, outcome="drained"))
    why = 'pods is forbidden: User "drain" cannot list resource "pods" in API group "" at the cluster scope'
    cluster = FakeCluster(nodes={NODE: node()}, pods_refused=why)

    # When Auto Scaling's terminate hook for the same instance comes
    outcome = acquire_after(records, cluster)(terminating(Step.ACQUIRE_SLOT), T0 + timedelta(minutes=2))

    # Then it cannot tell whether pods came back, so it drains the node as any (here: waits for a slot), whose
    # refused reads its timeout policy settles, rather than failing at every delivery until the global timeout
    assert outcome.then is None
    assert outcome.again


def maintenance(step: Step, starts: datetime, **changes: object) -> LifecycleRecord:
    """A scheduled maintenance of the instance starting at ``starts``."""
    return spot(
        step,
        id=f"{INSTANCE}/scheduled-change",
        transition=Transition.SCHEDULED_CHANGE,
        heartbeat_deadline=starts,
        global_deadline=starts,
        **changes,
    )


@pytest.mark.parametrize("pods_back", [False, True])
def test_a_terminate_hook_goes_on_from_the_drain_for_a_maintenance_while_the_next_one_waits(
    pods_back: bool,
) -> None:
    # Given the drain for a reboot of the instance, over, and the lifecycle of its retirement, days later,
    # started on the record after it (as a successor, or started over by intake): it waits for its lead time
    drained = maintenance(
        Step.DONE,
        T0 + timedelta(hours=1),
        node=NODE,
        zone="eu-west-1a",
        drain_started_at=T0,
        outcome="drained",
    )
    records = InMemoryRecords()
    records.create(drained.followed_by(maintenance(Step.ACQUIRE_SLOT, T0 + timedelta(days=10))))
    cluster = FakeCluster(nodes={NODE: node(unschedulable=True)}, pods=[pod("web-1")] if pods_back else [])
    slots = FakeSlots(room=0)

    # When Auto Scaling's terminate hook for the instance comes
    outcome = acquire_after(records, cluster, slots)(
        terminating(Step.ACQUIRE_SLOT), T0 + timedelta(minutes=5)
    )

    if pods_back:
        # Then, pods on the node again, it drains the node itself: it asks for a slot
        assert outcome.again
        assert len(slots.requests) == 1
    else:
        # Then it goes straight to its completion, on the node drained for the reboot, asking for no slot
        assert (outcome.then, outcome.changes["outcome"]) == (Step.COMPLETE, "drained-by:scheduled-change")
        assert outcome.changes["node"] == NODE
        assert slots.requests == []


REBOOT_AT = T0 + timedelta(hours=1)  # when EC2 reboots the instance (its window opens)


def drained_for(starts: datetime, **extra: object) -> LifecycleRecord:
    """A maintenance's lifecycle at its cleanup: the node cordoned (by it) and drained before ``starts``."""
    return maintenance(
        Step.CLEANUP,
        starts,
        node=NODE,
        zone="eu-west-1a",
        drain_started_at=T0,
        extra={"set_on_node": {"cordon": True, "lb": False}, **extra},
    )


def cordoned_for_maintenance() -> FakeCluster:
    """Our node, cordoned and annotated by the maintenance's lifecycle."""
    progress = json.dumps({"instance": INSTANCE, "transition": "scheduled-change", "token": "token"})
    claimed = node(owner="stack-a", in_progress=progress, unschedulable=True)
    return FakeCluster(nodes={NODE: claimed}, cordoned={NODE})


def reboot(code: str = "system-reboot", at: datetime = REBOOT_AT) -> ScheduledEvent:
    return ScheduledEvent(code=code, not_before=at, not_after=at + timedelta(hours=2))


@pytest.mark.parametrize("over", ["completed", "its window ended"])
def test_a_node_drained_for_a_reboot_is_uncordoned_once_the_reboot_is_over_and_its_instance_stayed(
    over: str,
) -> None:
    # Given our node, cordoned and drained for a system reboot EC2 will do in an hour, its instance running
    # in service
    cluster = cordoned_for_maintenance()
    ec2 = Ec2Maintenance(known={INSTANCE: "running"}, events=[reboot()])
    record = drained_for(REBOOT_AT)
    slots, events = FakeSlots(holders={NODE}, held_for={NODE: record.id}), FakeEvents()
    step = cleanup(cluster, slots, FakeAutoscaling(states={INSTANCE: "InService"}), events, ec2)

    # When its cleanup runs, before the reboot
    first = step(record, T0 + timedelta(minutes=1))

    # Then the annotations go and the slot is given back, but the cordon stays while the reboot may come: it
    # looks again when the window opens
    assert cluster.patches == [{"owner": None, "in_progress": None, "released_for": record.id}]
    assert (cluster.cordoned, slots.released) == ({NODE}, [NODE])
    assert first.again
    assert first.delay == (REBOOT_AT - T0 - timedelta(minutes=1)).total_seconds()

    # When it looks in the window, the instance rebooting (its kubelet gone) and EC2 done with it, or not yet
    watching = record.model_copy(update=first.changes)
    cluster.nodes[NODE] = cluster.nodes[NODE].model_copy(update={"ready": False})
    if over == "completed":
        ec2.events = []  # listed [Completed] from now on
    rebooting = step(watching, REBOOT_AT + timedelta(minutes=10))

    # Then it stays cordoned, looked at again in a minute
    assert (rebooting.again, rebooting.delay) == (True, MAINTENANCE_POLL_SECONDS)
    assert cluster.cordoned == {NODE}

    # When the node is Ready again (and, listed as pending still, its window ended a margin ago)
    cluster.nodes[NODE] = cluster.nodes[NODE].model_copy(update={"ready": True})
    later = REBOOT_AT + timedelta(minutes=11)
    if over == "its window ended":
        assert step(watching, later).again  # in its window still: it may come
        later = REBOOT_AT + timedelta(hours=2) + MAINTENANCE_OVER_AFTER + timedelta(seconds=1)
    lifted = step(watching, later)

    # Then what the lifecycle set on the node is lifted, its mark removed, and an Event tells so
    assert (lifted.then, lifted.again) == (None, False)
    assert cluster.patches[-1] == {"owner": None, "in_progress": None, "cordon": False}
    assert (cluster.cordoned, cluster.nodes[NODE].released_for, slots.released) == (set(), None, [NODE])
    assert (NODE, "UncordonedAfterMaintenance", "Normal") in events.written


@pytest.mark.parametrize(
    ("code", "ec2_state", "group_state"),
    [
        ("instance-stop", "stopped", "InService"),  # stopped by EC2; Auto Scaling not yet told
        ("instance-retirement", "stopped", "Terminating:Wait"),  # ...and its group replacing it
        ("system-maintenance", "running", "Terminating"),  # terminated by its group meanwhile
        ("instance-retirement", None, None),  # gone from EC2 and from its group
    ],
)
def test_a_node_drained_for_a_maintenance_its_instance_does_not_come_back_from_stays_cordoned(
    code: str, ec2_state: str | None, group_state: str | None
) -> None:
    # Given our node, cordoned and drained for EC2's maintenance of its instance, watched for its end
    cluster = cordoned_for_maintenance()
    ec2 = Ec2Maintenance(known={INSTANCE: "running"}, events=[reboot(code)])
    autoscaling, events = FakeAutoscaling(states={INSTANCE: "InService"}), FakeEvents()
    step = cleanup(cluster, FakeSlots(holders={NODE}), autoscaling, events, ec2)
    record = drained_for(REBOOT_AT)
    watching = record.model_copy(update=step(record, T0).changes)

    # When the maintenance is done and its instance is going or gone, its node NotReady
    ec2.events = []
    ec2.known = {INSTANCE: ec2_state} if ec2_state else {}
    autoscaling.states = {INSTANCE: group_state} if group_state else {}
    cluster.nodes[NODE] = cluster.nodes[NODE].model_copy(update={"ready": False})
    done = step(watching, REBOOT_AT + timedelta(minutes=5))

    # Then the watch ends with the node cordoned (no pod is sent to it), still marked released for the lifecycle
    # (out of a percent limit's nodes while its object lingers), and an Event tells why
    assert (done.then, done.again) == (None, False)
    assert (cluster.cordoned, cluster.nodes[NODE].released_for) == ({NODE}, record.id)
    assert (NODE, "CordonKeptAfterMaintenance", "Normal") in events.written


def test_a_cordon_claimed_since_by_a_later_lifecycle_is_not_lifted_after_the_maintenance() -> None:
    # Given our node kept cordoned after a reboot, watched for its end
    cluster = cordoned_for_maintenance()
    ec2 = Ec2Maintenance(known={INSTANCE: "running"}, events=[reboot()])
    step = cleanup(
        cluster, FakeSlots(holders={NODE}), FakeAutoscaling(states={INSTANCE: "InService"}), ec2=ec2
    )
    record = drained_for(REBOOT_AT)
    watching = record.model_copy(update=step(record, T0).changes)

    # When the group's terminate hook drains the node meanwhile (its claim), and then the reboot is over
    terminate = terminating(Step.CORDON, node=NODE)
    cordon(cluster)(terminate, REBOOT_AT)
    ec2.events = []
    done = step(watching, REBOOT_AT + timedelta(minutes=5))

    # Then the watch ends and the cordon, the hook's now, stays
    assert (done.then, done.again) == (None, False)
    assert cluster.cordoned == {NODE}
    assert cluster.nodes[NODE].owner == "stack-a"


def test_a_node_drained_for_two_maintenances_in_turn_is_uncordoned_once_the_second_is_over() -> None:
    # Given our node drained for a reboot, and the instance's retirement in ten days queued on the record
    # after it (its lifecycle follows once this one is over)
    retirement_at = T0 + timedelta(days=10)
    later = maintenance(Step.ACQUIRE_SLOT, retirement_at, token="retirement")
    cluster = cordoned_for_maintenance()
    ec2 = Ec2Maintenance(
        known={INSTANCE: "running"}, events=[reboot(), reboot("instance-reboot", retirement_at)]
    )
    autoscaling = FakeAutoscaling(states={INSTANCE: "InService"})
    step = cleanup(cluster, FakeSlots(holders={NODE}), autoscaling, ec2=ec2)
    record = drained_for(REBOOT_AT, successor=later.model_dump(mode="json"))

    # When its cleanup runs
    done = step(record, T0 + timedelta(minutes=1))

    # Then it leaves the node cordoned to the next maintenance's lifecycle, marked for the record
    assert (done.then, done.again) == (None, False)
    assert (cluster.cordoned, cluster.nodes[NODE].released_for) == ({NODE}, record.id)

    # When the next lifecycle cordons the node before its own maintenance, and cleans up once that is over
    following = record.followed_by(later).model_copy(update={"step": Step.CORDON, "node": NODE})
    claimed = cordon(cluster)(following, retirement_at - timedelta(hours=1))
    assert (
        claimed.changes["extra"]["set_on_node"]["cordon"] is True
    )  # taken over: the node was cordoned already
    ec2.events = []
    after = following.model_copy(update={"step": Step.CLEANUP, **claimed.changes})
    lifted = step(after, retirement_at + timedelta(minutes=30))

    # Then the cordon set for the first is lifted now that the second is over too
    assert (lifted.then, lifted.again) == (None, False)
    assert cluster.cordoned == set()


def test_a_terminate_hook_goes_on_at_once_while_the_maintenance_drain_watches_for_the_maintenance_end() -> (
    None
):
    # Given the drain for a reboot of the instance, over, its cleanup watching for the reboot's end
    records = InMemoryRecords()
    watching = drained_for(REBOOT_AT, maintenance_watch=T0.isoformat())
    records.create(watching)
    cluster = FakeCluster(nodes={NODE: node(unschedulable=True)})
    slots = FakeSlots(room=0)

    # When Auto Scaling's terminate hook for the instance comes, well after a drain's time
    outcome = acquire_after(records, cluster, slots)(terminating(Step.ACQUIRE_SLOT), T0 + timedelta(hours=1))

    # Then it goes straight to its completion on the node drained for the reboot, asking for no slot
    assert (outcome.then, outcome.changes["outcome"]) == (Step.COMPLETE, "drained-by:scheduled-change")
    assert slots.requests == []


def test_a_terminate_hook_waits_for_a_stuck_disruption_drain_no_longer_than_a_drain_of_its_own() -> None:
    # Given the Spot interruption's drain of the instance, stuck at EVICT (its messages dead-lettered, the
    # sweeper's resumes spent), and the group's terminate hook of the instance, received at T0
    records = InMemoryRecords()
    records.create(spot(Step.EVICT, node=NODE, zone="eu-west-1a", drain_started_at=T0, resumes=MAX_RESUMES))
    cluster, slots = FakeCluster(nodes={NODE: node()}, pods=[pod("web-1")]), FakeSlots(room=1)
    step = acquire_after(records, cluster, slots)
    hook = terminating(Step.ACQUIRE_SLOT)
    # a drain begun at T0 takes at most its timeout, the force policy's grace, a stuck pod's minute, 5 s for the
    # looks at its deadline and the force's end, and the margin before the global timeout (the load balancer delay
    # is 0 here)
    ends = T0 + timedelta(seconds=600 + 5 + 60 + 5 + 420)

    # While that drain could still be running (in its force phase, say), the hook waits for it
    assert step(hook, ends).again
    assert slots.requests == []

    # When it has had all that time, Then the hook drains the node itself: it asks for a slot
    outcome = step(hook, ends + timedelta(seconds=1))
    assert len(slots.requests) == 1
    assert outcome.then is None
    assert not outcome.again


def test_a_lifecycle_of_an_instance_another_of_its_lifecycles_drains_waits_unless_it_cannot() -> None:
    # Given a node whose slot a terminate hook's drain holds
    records = InMemoryRecords()
    cluster = FakeCluster(nodes={NODE: node(owner="stack-a")}, pods=[pod("web-1")])
    slots = FakeSlots(room=1, holders={NODE}, held_for={NODE: "i-0123456789abcdef0/terminate/token"})
    step = acquire_after(records, cluster, slots)

    # When a rebalance recommendation of the instance asks for the node's slot, Then it waits for that drain,
    # in line for the node (since when it waits is kept, so that the release of that drain's slot wakes it)
    later = T0 + timedelta(days=2)  # a rebalance recommendation has no deadline to speak of
    rebalance = spot(
        Step.ACQUIRE_SLOT,
        id=f"{INSTANCE}/rebalance",
        transition=Transition.REBALANCE,
        node=NODE,
        heartbeat_deadline=later,
        global_deadline=later,
    )
    waiting = step(rebalance, T0)
    assert waiting.again
    assert waiting.changes["slot_waiting_since"] == T0
    # while a Spot interruption, which cannot wait, goes on to drain within the slot the node holds
    interrupted = step(spot(Step.ACQUIRE_SLOT, node=NODE), T0)
    assert interrupted.then is None
    assert not interrupted.again
    assert slots.held_for[NODE] == "i-0123456789abcdef0/terminate/token"


def test_a_rebalance_recommendation_never_takes_a_slot_past_the_budget_whatever_its_record_deadline() -> None:
    # Given a full budget, and a rebalance recommendation's drain whose record's global deadline (a horizon
    # intake gives it: a recommendation has no deadline) is a few minutes away
    cluster, slots = FakeCluster(nodes={NODE: node()}), FakeSlots(room=1, holders={"other-node"})
    horizon = T0 + timedelta(minutes=5)
    rebalance = spot(
        Step.ACQUIRE_SLOT,
        id=f"{INSTANCE}/rebalance",
        transition=Transition.REBALANCE,
        heartbeat_deadline=horizon,
        global_deadline=horizon,
    )
    # When it asks for a slot
    outcome = acquire(cluster, slots)(rebalance, T0)
    # Then it waits in line like any voluntary disruption: neither forced past the budget nor ahead of others
    (asked,) = slots.requests
    assert (asked.force, asked.urgent_at) == (False, None)
    assert outcome.again
    assert NODE not in slots.holders


@pytest.mark.parametrize(
    "how", ["uncordoned after the maintenance, pods came back", "the drain timed out and left pods there"]
)
def test_a_drain_for_a_disruption_does_not_excuse_a_terminate_hook_from_draining_pods_on_the_node_now(
    how: str,
) -> None:
    # Given a disruption's drain of the instance, over (days ago, or ended without emptying the node), and
    # pods on its node now
    records = InMemoryRecords()
    outcome = "drained" if how.startswith("uncordoned") else "drain-timeout-continued"
    earlier = T0 - timedelta(days=2)
    records.create(spot(Step.DONE, node=NODE, zone="eu-west-1a", drain_started_at=earlier, outcome=outcome))
    cluster = FakeCluster(nodes={NODE: node()}, pods=[pod("web-1")])
    # When Auto Scaling's terminate hook for the instance comes
    step = acquire_after(records, cluster)(terminating(Step.ACQUIRE_SLOT), T0 + timedelta(seconds=30))
    # Then it drains the node itself: it asks for a slot (none free here) instead of completing
    assert step.then is not Step.COMPLETE
    assert step.again
    assert "outcome" not in step.changes


def test_a_rebalance_recommendation_that_only_cordoned_is_no_drain_for_the_terminate_hook() -> None:
    # Given a rebalance recommendation that this stack only cordons for, over (Capacity Rebalancing's usual
    # sequence: the recommendation, then the group terminates the instance)
    records = InMemoryRecords()
    cordoned = spot(
        Step.DONE,
        plan=(Step.CORDON, Step.CLEANUP, Step.DONE),
        id=f"{INSTANCE}/rebalance",
        transition=Transition.REBALANCE,
        node=NODE,
        drain_started_at=T0,
        outcome="cordoned",
    )
    records.create(cordoned)
    cluster, slots = FakeCluster(nodes={NODE: node()}, pods=[pod("web-1")]), FakeSlots(room=1)
    step = acquire_after(records, cluster, slots)

    # When the terminate hook for the instance comes
    outcome = step(terminating(Step.ACQUIRE_SLOT), T0 + timedelta(minutes=2))

    # Then it drains the node itself: a cordon evicted nothing
    assert outcome.then is not Step.COMPLETE
    assert "outcome" not in outcome.changes
    assert len(slots.requests) == 1


def test_a_terminate_hook_after_a_drained_spot_interruption_still_releases_its_address() -> None:
    records = InMemoryRecords()
    records.create(spot(Step.DONE, node=NODE, drain_started_at=T0, outcome="drained"))
    plain = terminating(Step.ACQUIRE_SLOT).plan  # with the address released before the completion
    plan = (*plain[: plain.index(Step.COMPLETE)], Step.RELEASE_EIP, *plain[plain.index(Step.COMPLETE) :])
    outcome = acquire_after(records)(terminating(Step.ACQUIRE_SLOT, plan=plan), T0 + timedelta(minutes=2))
    assert outcome.then is Step.RELEASE_EIP
    assert outcome.changes["outcome"] == "drained-by:spot-interruption"


def test_an_instance_gone_outside_the_hooks_has_its_slot_and_annotations_freed() -> None:
    # Given our node of an instance that was terminated without its hook, mid-drain, and another lifecycle
    # waiting for the slot it holds
    progress = json.dumps({"instance": INSTANCE, "transition": "terminate", "token": "t1"})
    cluster = FakeCluster(nodes={NODE: node(owner="stack-a", in_progress=progress)})
    records, waker_queues = InMemoryRecords(), RecordingQueues()
    waiting = terminating(
        Step.ACQUIRE_SLOT, id="i-0aaaaaaaaaaaaaaaa/terminate/t2", seq=4, slot_waiting_since=T0
    )
    records.create(waiting)
    slots = FakeSlots(holders={NODE}, waiters=[waiting.id])
    waker = Dispatcher(records=records, queues=waker_queues, clock=FakeClock(T0), metrics=FakeMetrics())
    record = spot(Step.FORGET_NODE, transition=Transition.STATE_CHANGE, id=f"{INSTANCE}/state-change")
    # When the state change's step runs
    outcome = ForgetNode(
        finder=NodeFinder(cluster, NoDns()),
        cluster=cluster,
        slots=slots,
        dispatcher=waker,
        instances=NoDns(),
        policy=policy(),
    )(record, T0)
    # Then the annotations (of whichever lifecycle) are cleared, marked as that lifecycle's (whose cleanup
    # may still lift its cordon), and the instance's budget entries forgotten
    assert cluster.patches == [
        {"owner": None, "in_progress": None, "released_for": f"{INSTANCE}/terminate/t1"}
    ]
    assert slots.forgotten == [INSTANCE]
    assert outcome.changes["outcome"] == "instance-gone-without-hook"
    # and the lifecycle waiting for its slot is woken at once
    (wake,) = waker_queues.take()
    assert (wake.message.record_id, wake.message.wake) == (waiting.id, True)


def test_an_instance_gone_outside_the_hooks_reads_its_node_again_if_it_changed_since_it_was_listed() -> None:
    # Given our node as a list found it (the API server's watch cache, at version 7), while the node itself
    # has moved on to version 8
    progress = json.dumps({"instance": INSTANCE, "transition": "terminate", "token": "t1"})
    cluster = FakeCluster(nodes={NODE: node(owner="stack-a", in_progress=progress, resource_version="8")})
    listed = node(owner="stack-a", in_progress=progress)
    cluster.find_node = lambda *args, **kwargs: listed  # type: ignore[method-assign]
    slots = FakeSlots(holders={NODE})
    waker = Dispatcher(
        records=InMemoryRecords(), queues=RecordingQueues(), clock=FakeClock(T0), metrics=FakeMetrics()
    )
    record = spot(Step.FORGET_NODE, transition=Transition.STATE_CHANGE, id=f"{INSTANCE}/state-change")
    step = ForgetNode(
        finder=NodeFinder(cluster, NoDns()),
        cluster=cluster,
        slots=slots,
        dispatcher=waker,
        instances=NoDns(),
        policy=policy(),
    )

    # When the state change's step runs, Then the stale patch is refused (409): nothing is cleared or
    # forgotten, and the step reads the node again a second later
    outcome = step(record, T0)
    assert (outcome.again, outcome.delay) == (True, 1)
    assert (cluster.patches, slots.forgotten) == ([], [])
    # and once it reads the node as it is, it frees everything
    cluster.find_node = lambda *args, **kwargs: cluster.nodes[NODE]  # type: ignore[method-assign]
    assert step(record, T0 + timedelta(seconds=1)).changes["outcome"] == "instance-gone-without-hook"
    assert slots.forgotten == [INSTANCE]


def test_a_drain_whose_node_object_is_gone_evicts_nothing_more_and_settles() -> None:
    # Given a drain in progress whose node object was deleted (its instance gone, or the node deregistered),
    # the pods still bound to its name all on their way out: the garbage collector removes them
    cluster = FakeCluster(nodes={}, pods=[pod("web-1", deletion_at=T0)])

    outcome = evict(cluster)(draining(), T0 + timedelta(seconds=30))

    assert (outcome.then, outcome.changes["outcome"]) == (Step.COMPLETE, "node-gone")
    assert cluster.evictions == []


def test_a_drain_whose_node_object_is_gone_asks_the_pods_still_bound_to_it_to_leave_until_its_deadline() -> (
    None
):
    # Given a drain in progress whose node object was deleted under its pods, one of them under a
    # PodDisruptionBudget that allows no eviction
    cluster = FakeCluster(nodes={}, pods=[pod("web-1"), pod("db-0")], blocked={"db-0"})
    metrics = FakeMetrics()
    step = evict(cluster, metrics=metrics)

    # When it polls before its deadline, Then they are asked to leave (the one the budget allows goes) and it
    # waits for them
    waiting = step(draining(), T0 + timedelta(seconds=30))
    assert (waiting.then, waiting.again) == (None, True)
    assert [name for name, _ in cluster.evictions] == ["web-1"]

    # When it polls at its deadline, the blocked pod still there, Then its timeout policy acts as on a node that
    # is there (force, the default: the pod deleted, waited for), the timeout counted; not node-gone, the action
    # completed under the pod
    forcing = step(polled(), T0 + timedelta(seconds=600))
    assert (forcing.then, forcing.again) == (None, True)
    assert [name for name, _ in cluster.deletions] == ["db-0"]
    assert metrics.counts["DrainTimeouts"] == 1


def test_a_drain_whose_node_object_is_gone_goes_on_at_its_deadline_under_the_continue_policy() -> None:
    # Given a drain whose node object was deleted under its pods, one a PodDisruptionBudget keeps, at its deadline
    cluster = FakeCluster(nodes={}, pods=[pod("db-0")], blocked={"db-0"})
    metrics = FakeMetrics()

    # When it polls, its timeout policy continue, Then it goes on with the pod still there, the timeout counted
    outcome = evict(cluster, metrics=metrics, timeout_policy="continue")(
        polled(), T0 + timedelta(seconds=600)
    )
    assert (outcome.then, outcome.again) == (None, False)
    assert outcome.changes["outcome"] == "drain-timeout-continued"
    assert metrics.counts["DrainTimeouts"] == 1
    assert cluster.deletions == []


# (an instance EC2 does not list is not one down: see tests/integration/kube/test_drain_ec2_lag.py)
@pytest.mark.parametrize("state", ["terminated", "shutting-down", "stopped"])
def test_a_drain_whose_node_object_is_gone_with_its_instance_down_settles_at_once(state: str | None) -> None:
    # Given a drain in progress whose instance went down (a Spot reclaim, a stop) and whose node object the
    # cloud controller deleted, its pods still bound to its name: no kubelet will ever stop them
    cluster = FakeCluster(nodes={}, pods=[pod("web-1"), pod("db-0", deletion_at=T0 + timedelta(seconds=60))])
    ec2 = NoDns(known={INSTANCE: state} if state else {})

    outcome = evict(cluster, ec2=ec2)(draining(), T0 + timedelta(seconds=30))

    # Then it settles at once, as for an instance found down at a poll: waiting for the pods' grace would only
    # hold the slot, and evicting them asks nothing of an instance that is gone
    assert (outcome.then, outcome.changes["outcome"]) == (Step.COMPLETE, "instance-down")
    assert cluster.evictions == []


def test_a_late_stop_of_an_instance_up_again_frees_nothing_of_its_newer_lifecycle() -> None:
    # Given the stop of the instance into its warm pool, whose FORGET_NODE comes 20 minutes late (a redelivery,
    # a resume, a dead-letter redrive), when the instance is back and drained for a new terminate action (t3):
    # its annotations and its budget slot are t3's
    stop = spot(Step.FORGET_NODE, transition=Transition.STATE_CHANGE, id=f"{INSTANCE}/state-change")
    later = T0 + timedelta(minutes=20)
    progress = json.dumps({"instance": INSTANCE, "transition": "terminate", "token": "t3"})
    cluster = FakeCluster(nodes={NODE: node(owner="stack-a", in_progress=progress)}, cordoned={NODE})
    records, queues = InMemoryRecords(), RecordingQueues()
    waiting = terminating(
        Step.ACQUIRE_SLOT, id="i-0aaaaaaaaaaaaaaaa/terminate/w", instance_id="i-0aaaaaaaaaaaaaaaa"
    )
    records.create(waiting)
    slots = FakeSlots(holders={NODE}, held_for={NODE: f"{INSTANCE}/terminate/t3"}, waiters=[waiting.id])
    waker = Dispatcher(records=records, queues=queues, clock=FakeClock(later), metrics=FakeMetrics())
    ec2 = NoDns(known={INSTANCE: "running"})

    # When the late step runs
    outcome = ForgetNode(
        finder=NodeFinder(cluster, ec2),
        cluster=cluster,
        slots=slots,
        dispatcher=waker,
        instances=ec2,
        policy=policy(),
    )(stop, later)

    # Then t3 keeps its slot and annotations, and nobody is woken into the slot t3 still drains with
    assert outcome.changes["outcome"] == "instance-up-again"
    assert (slots.forgotten, cluster.patches, queues.take()) == ([], [], [])


def test_a_late_cleanup_of_an_old_warm_pool_lifecycle_leaves_a_later_lifecycles_cordon_alone() -> None:
    # Given t1, a terminate of the instance into its warm pool long ago, whose cleanup comes late; and t3, the
    # instance back from the pool and terminated for good: t3 cordoned the node, completed, and cleaned up
    # (the cordon stays: the instance is going)
    t1 = terminating(
        Step.CLEANUP,
        id=f"{INSTANCE}/terminate/t1",
        token="t1",
        node=NODE,
        destination="WarmPool",
        drain_started_at=T0,
    )
    cluster = FakeCluster(nodes={NODE: node()})
    later = T0 + timedelta(hours=2)
    t3 = terminating(Step.CORDON, id=f"{INSTANCE}/terminate/t3", token="t3", node=NODE)
    claimed = cordon(cluster)(t3, later)
    waker = Dispatcher(
        records=InMemoryRecords(), queues=RecordingQueues(), clock=FakeClock(later), metrics=FakeMetrics()
    )
    autoscaling = FakeAutoscaling(states={INSTANCE: "Terminating:Proceed"})
    slots = FakeSlots(holders={NODE}, held_for={NODE: t3.id})
    cleanup = Cleanup(
        cluster=cluster,
        slots=slots,
        dispatcher=waker,
        autoscaling=autoscaling,
        metrics=FakeMetrics(),
        events=FakeEvents(),
        instances=Ec2Maintenance(),
    )
    cleanup(t3.model_copy(update={"step": Step.CLEANUP, "drain_started_at": later, **claimed.changes}), later)
    assert NODE in cluster.cordoned

    # When t1's late cleanup runs while the node is still there
    cleanup(t1, later + timedelta(seconds=5))

    # Then the node of the terminating instance stays cordoned: that cordon is t3's, and the node is not coming
    # back
    assert NODE in cluster.cordoned
    assert cluster.nodes[NODE].unschedulable


def test_a_node_cordoned_and_excluded_before_the_claim_stays_so_when_it_comes_back() -> None:
    # Given a node an operator cordoned, of a node group labelled out of external load balancers
    cluster = FakeCluster(nodes={NODE: node(unschedulable=True, excluded_from_lb=True)}, cordoned={NODE})
    record = terminating(Step.CORDON, node=NODE, destination="WarmPool")
    claim = cordon(cluster)

    # When nodecycle claims it (twice: a redelivery after a crash before the record said so)
    claimed = claim(record, T0)
    again = claim(record, T0 + timedelta(seconds=1))

    # Then it notes that it set neither, in the record and on the node
    assert claimed.changes["extra"]["set_on_node"] == again.changes["extra"]["set_on_node"]
    assert claimed.changes["extra"]["set_on_node"] == {"cordon": False, "lb": False}
    assert json.loads(str(cluster.nodes[NODE].in_progress))["cordon"] is False

    # and when its instance goes into the warm pool and comes back, the cordon and the label stay
    back = FakeAutoscaling(states={INSTANCE: "Pending"})  # taken out of the pool again
    step = cleanup(cluster, FakeSlots(holders={NODE}, held_for={NODE: record.id}), back)
    watching = record.model_copy(update={"step": Step.CLEANUP, **claimed.changes})
    watching = watching.model_copy(update=step(watching, T0).changes)
    cluster.leases[NODE] = T0 + timedelta(seconds=5)  # (its kubelet running again)
    step(watching, T0 + timedelta(seconds=10))
    assert cluster.patches[-1] == {"owner": None, "in_progress": None}
    assert (cluster.nodes[NODE].unschedulable, cluster.nodes[NODE].excluded_from_lb) == (True, True)


def test_an_action_another_stack_drains_the_node_for_is_never_completed_here_while_it_drains() -> None:
    # Given another stack draining the node for the very action this stack received as well (one group
    # managed by both by mistake: same instance, same token), its drain begun 300 s after ours was received
    record = terminating(Step.ACQUIRE_SLOT)
    theirs = json.dumps(
        {
            "instance": record.instance_id,
            "transition": "terminate",
            "token": record.token,
            "started": (T0 + timedelta(seconds=300)).isoformat(),
        }
    )
    cluster = FakeCluster(nodes={NODE: node(owner="stack-b", in_progress=theirs)})

    # When this stack asks again after its own drain timeout (600 s) since it received the action
    outcome = acquire(cluster, FakeSlots(others={NODE: "stack-b"}))(record, T0 + timedelta(seconds=601))

    # Then it waits for the other's drain instead of completing the action under it
    assert outcome.again
    assert outcome.then is None
