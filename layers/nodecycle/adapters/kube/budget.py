"""The disruption budget's ports on the Kubernetes API: the shared ConfigMap, and the nodes in scope.

Both take a zero-argument factory of a ``kubernetes.client.CoreV1Api`` and call it once per operation, so
the cluster-access module that builds it stays in charge of caching the client and refreshing its token.
"""

from __future__ import annotations

import hashlib
import json
import logging
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace
from typing import Any

from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError

from nodecycle.adapters.kube.cluster_api import node_info, zone_of
from nodecycle.adapters.kube.errors import forbidden_refused, kube_errors, retry_after
from nodecycle.adapters.kube.lists import pages
from nodecycle.adapters.kube.server_clock import server_date
from nodecycle.domain.budget import BudgetDocument, BudgetFormatError, NodeState
from nodecycle.domain.budget.document import (
    MAX_CLOCK_AHEAD,
    Holder,
    OwnerLimits,
    Released,
    Stamped,
    Waiter,
)
from nodecycle.domain.budget.errors import WriteOutcomeUnknown
from nodecycle.domain.budget.seed import DrainInProgress
from nodecycle.domain.errors import TransientError
from nodecycle.domain.ports.cluster import RELEASED_FOR_ANNOTATION, Refused

log = logging.getLogger(__name__)

DATA_KEY = "budget.json"
# Where each write says which object it wrote the document to, and what it wrote: "<the ConfigMap's uid>
# <sha256 of the document>" (a key of the data beside the document's, not an annotation: what people and tools put
# in the metadata is theirs). Whether the budget can vouch for a document (see BudgetDocument.unvouched; _vouched) is
# told first by the API server, which records who set each key last (metadata.managedFields): a stack's writes are
# FIELD_MANAGER's, by a replace (an Update). A document or note set by any other manager, or by a server-side apply
# under any name, FIELD_MANAGER's included (a ConfigMap restored from a backup, a snapshot of the whole object
# applied again to it, a document re-applied by a GitOps tool or edited by hand) is not the budget's,
# however recent, and however well its note matches it. An older nodecycle, which keeps the note as it was (it knows
# nothing of it), writes as FIELD_MANAGER too (its User-Agent's name): the note then names another digest, and the
# document is a stack's all the same. Where the API server tells nothing (no managedFields: a server that keeps none,
# or they were stripped), the note tells: another uid or digest is not vouched for; and without the note, the stamps
# (see _not_written_since). Not told: a snapshot applied again whose note is the note in place (taken after this
# version's last write), written over by an older stack before this version reads it, the older stack's write
# then taking the document for its own; only while an older stack shares the cluster.
WRITTEN_KEY = "budget.written"
# When the API server last had a document put in this ConfigMap that no stack wrote there (see _vouched: restored,
# a snapshot written back, edited by hand), or the document removed beside a stack's note (as BudgetUnreadable says
# to), as the first write after it found it (an RFC 3339 time by the API server's clock). What the budget wrote
# before then may be missing from the document, as from a ConfigMap created again: the places in line of the waiters
# that joined since, the marks of the slots given back since.
# The budget tells a ConfigMap created again by its creation (BudgetDocument.created_at: a waiter that began to wait
# before it takes its place back, a slot asked for by a lifecycle begun before it is judged on its record); a
# snapshot written back into the ConfigMap as it is keeps the old creation, so the document's beginning is the later
# of the two. A key beside the document's (not in it: a stack of format 3 refuses a field it does not know), which
# an older stack keeps as it is.
RESTORED_KEY = "budget.restored"
# Which clock each of the document's entries (holders, waiters, slots given back, and each owner's limits) was stamped
# on: lines "<lead> <digest> <digest> ...", the lead in whole seconds of the writer's clock over the API server's (see
# _lead), each digest an entry's stamps as stored (see _digests). Every writer stores its stamps on its own clock, as the
# version before this key did and still reads them (its readers take every stamp for their own clock's); a reader of
# this version puts an entry named here on the API server's clock by its writer's lead, and from there on its own
# (see BudgetDocument.on_clocks): a drain function whose clock ran 5 minutes behind the others' stamped its renewals 5
# minutes old in their view, and they took its slot for expired and granted it again while its drain evicted
# (invariant 1), under any TTL below 5 minutes and a third of itself. An entry not named (written by the version
# before, or by this one past the API server's limit) is read on the reader's own clock, as the version before read
# it: stored on the API server's clock instead, a fleet whose clocks all ran 5 minutes behind it (consistent with
# itself before) read an old container's holder 5 minutes older than it was, and granted its slot again while its
# drain evicted; and an old container read this version's stamps 5 minutes off. An older stack keeps this key as it
# is (it knows nothing of it): the entries it restamps get another digest, no longer named; those whose stamps it
# keeps are still named. A key beside the document's (the document itself forbids unknown fields). Near the API server's
# limit, it names what fits, the holders first (see _stamped): the others are read on each reader's clock until a
# write fits them again. (At its worst, 2,000 waiters grown to every field, 76 KB are left of the 1 MiB; 4 KB beside
# 500 holders: 235 of them named, 17 bytes each.)
CLOCK_KEY = "budget.clock"
# The manager every write of the document is recorded under, whatever the client's User-Agent (the CLI's, a test's):
# the name the functions' User-Agent gives (see eks_access), so an older stack's writes are recorded under it too.
FIELD_MANAGER = "nodecycle"
# The manager of a write of a document the budget could not vouch for that was not seeded first (the CLI's release of
# a slot, which does not list the nodes): under FIELD_MANAGER it would vouch for what the restore or edit put there,
# and the drains in progress it left out would never be counted. Recorded under another name, the document is still
# not the budget's, and its next write seeds it.
UNSEEDED_MANAGER = "nodecycle-unseeded"
# The lead of a reader's clock over the API server's that is not told from the way its Date is measured (to the second,
# the answer's way added): taken as none, so that the stamps of readers on time are stored as they took them. A lead
# told is kept until a measure departs from it by more, so that a document read twice in a row reads the same (a write
# whose answer was lost is known as landed by its read back, byte for byte: see DisruptionBudget._landed).
CLOCK_TOLERANCE = timedelta(seconds=2)
CONFIGMAP_MAX_BYTES = 1024 * 1024  # the API server's bound on a ConfigMap's data (keys and values)
REQUEST_TIMEOUT = (5, 15)  # connect, read: a Lambda step must not hang on a dead connection
# What the cloud provider's node lifecycle controller puts on the node of a stopped instance (and takes off
# when it starts again), keeping the node object: see NodeState.shut_down.
SHUTDOWN_TAINT = "node.cloudprovider.kubernetes.io/shutdown"
# The taints other tools keep pods off a node with while they remove it, in place of a cordon (spec.unschedulable):
# cluster-autoscaler's scale-down (kubernetes/autoscaler, cluster-autoscaler/utils/taints: it cordons too only with
# --cordon-node-before-terminating, off by default), Karpenter's disruption (kubernetes-sigs/karpenter,
# pkg/apis/v1/taints.go; "karpenter.sh/disruption" before its v1 API). That tool evicts the node's pods and ends its
# instance: a disruption under way, which an owner counting unavailable nodes counts as it counts a cordoned node.
# (cluster-autoscaler's DeletionCandidateOfClusterAutoscaler is PreferNoSchedule: a node that may go later, serving.)
REMOVAL_TAINTS = frozenset(
    {"ToBeDeletedByClusterAutoscaler", "karpenter.sh/disrupted", "karpenter.sh/disruption"}
)
# The most a writer's lead (see CLOCK_KEY) is taken to be: more is no clock a stack runs on, but a note edited by hand
MAX_LEAD = timedelta(days=1)
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)

CoreV1Factory = Callable[[], Any]  # () -> kubernetes.client.CoreV1Api


class BudgetNotInstalled(Refused):
    """The budget ConfigMap does not exist: the cluster side of the deployment was not applied, or the ConfigMap
    was deleted and is not created again yet (``kubectl delete``, then a GitOps sync or an operator applying
    deploy/rbac.yaml again, seconds to a minute later). The ConfigMap's answer, as a refused read is: a step
    decides on it (a drain's poll waits its poll interval, evicting nothing; the engine retries an ask in
    seconds, up to its refused tries, then fails its message: the alarm). Raised as a plain error, it failed the
    step's message at once, which the queue delivered again only after its visibility timeout: every drain that
    polled in the window stalled that long, its slot held idle."""

    def __init__(self, namespace: str, name: str) -> None:
        super().__init__(
            f"the disruption budget ConfigMap {namespace}/{name} does not exist, and nodecycle does not create "
            f"it (its RBAC has no create). Apply the cluster side of the deployment, which ships it empty: "
            f"`kubectl apply -f deploy/rbac.yaml`, or for BudgetNamespace={namespace}: "
            f"`nodecycle rbac --namespace {namespace} --group-prefix GROUP | kubectl apply -f -`, GROUP the stack's "
            f"KubernetesGroup parameter (nodecycle by default: the groups its functions' access entries name)"
        )
        self.namespace = namespace
        self.name = name


class BudgetUnreadable(Refused, BudgetFormatError):
    """The budget ConfigMap's document is not one this version reads: another stack sharing the cluster wrote a
    newer format, or someone edited it (``kubectl edit`` with a typo), or a GitOps tool or a backup put another
    document there. Nothing is decided on it, and it is never rewritten (a newer format is another stack's, and an
    edit is a person's to look at): the ConfigMap's answer, as a refused read is (see :class:`BudgetNotInstalled`).
    Raised as the document's plain ``BudgetFormatError`` (a ``ValueError``), it failed every ask, poll and release
    of every drain at once, each message delivered again after its visibility timeout and failing again until
    dead-lettered; refused, a drain's poll evicts nothing and tells why on its node, an ask is retried up to its
    refused tries and then fails its message (the alarm). Still a ``BudgetFormatError``, for the CLI."""

    def __init__(self, namespace: str, name: str, error: BudgetFormatError) -> None:
        super().__init__(
            f"the disruption budget ConfigMap {namespace}/{name} holds a document (key {DATA_KEY}) this nodecycle "
            f"cannot read, and decides nothing on it: {error}. If a stack sharing the cluster runs a newer "
            f"nodecycle, upgrade this one; if it was edited or restored by hand, fix it, or remove the key "
            f"(`kubectl -n {namespace} edit configmap {name}`): a budget without a document is seeded again from "
            f"the drains in progress its nodes show"
        )
        self.namespace = namespace
        self.name = name


class BudgetImmutable(Refused):
    """The budget ConfigMap was made immutable (``immutable: true``: a GitOps tool's or a kustomization's generator, an
    operator freezing it): the API server refuses every change of its data (422 Forbidden), and nothing makes it
    mutable again but deleting it and creating it again. No slot can be granted, renewed or given back: the
    ConfigMap's answer, as a refused read is (see :class:`BudgetNotInstalled`). Sent, each write was refused and
    raised as a transient error, logged as a document too large: retried until its message was dead-lettered, with
    nothing that said why nor how out."""

    def __init__(self, namespace: str, name: str) -> None:
        super().__init__(
            f"the disruption budget ConfigMap {namespace}/{name} is immutable (immutable: true): the API server "
            f"refuses every write of the budget to it, so no slot is granted, renewed or given back. An immutable "
            f"ConfigMap cannot be made mutable again: delete it and apply it again without immutable "
            f"(`kubectl -n {namespace} delete configmap {name}`, then `kubectl apply -f deploy/rbac.yaml`, or your "
            f"GitOps source without immutable): a budget created again is seeded from the drains in progress its "
            f"nodes show"
        )
        self.namespace = namespace
        self.name = name


class BudgetCrowdedOut(Refused):
    """The budget ConfigMap has no room for the budget's document within the API server's 1 MiB for a ConfigMap's
    data, taken by keys the budget does not write (a backup of the document pasted beside it, a tool's notes), which
    it keeps as it found them: every write would be refused (422 Too long), however small the document, until a
    person moves them out. The ConfigMap's answer, as a refused read is (see :class:`BudgetNotInstalled`). Sent, each
    write was refused and raised as a transient error, logged as the document too large: retried until its message
    was dead-lettered, nothing saying which keys took the room."""

    def __init__(self, namespace: str, name: str, document_bytes: int, others: dict[str, int]) -> None:
        keys = ", ".join(
            f"{key}: {size} bytes" for key, size in sorted(others.items(), key=lambda kv: -kv[1])
        )
        super().__init__(
            f"the disruption budget ConfigMap {namespace}/{name} has no room for the budget's document "
            f"({document_bytes} bytes) within the API server's limit of {CONFIGMAP_MAX_BYTES} bytes for a "
            f"ConfigMap's data: keys nodecycle does not write take {sum(others.values())} bytes of it ({keys}). "
            f"Move them out of it (`kubectl -n {namespace} edit configmap {name}`): until then no slot is granted, "
            f"renewed or given back"
        )
        self.namespace = namespace
        self.name = name


class BudgetWriteRefused(Refused):
    """A write of the budget ConfigMap, within its 1 MiB, that the API server refused for a reason of its own: an
    admission policy (a ValidatingAdmissionPolicy's deny: 422 Invalid; a webhook's: 403 Forbidden on today's
    kube-apiserver, 400 on older ones, or the code it chose), a proxy
    in front of the API server that takes no body that large (413), a field a newer server does not take (400).
    The same write is refused again until a person changes what refuses it: the ConfigMap's answer, as a refused
    read is (see :class:`BudgetNotInstalled`), in the server's words. Raised as a transient error, it was retried
    until its message was dead-lettered, logged as a document too large; a 400 failed it as a plain error."""

    def __init__(self, namespace: str, name: str, status: int, message: str, data_bytes: int) -> None:
        super().__init__(
            f"the API server refused the write of the disruption budget ConfigMap {namespace}/{name} "
            f"({data_bytes} bytes of data, within its limit of {CONFIGMAP_MAX_BYTES}): HTTP {status} {message}. "
            f"Until what refuses it (an admission policy or webhook on ConfigMaps in {namespace}, a proxy's body "
            f"limit) lets nodecycle's writes of it through, no slot is granted, renewed or given back"
        )
        self.namespace = namespace
        self.name = name
        self.status = status


# An entry's writer's lead (None: not told) and its digest as stored
type _Told = tuple[timedelta | None, str]


@dataclass(frozen=True)
class _Clocks:
    """The entries of a document as read (on the reader's clock), each with the lead of the writer that stamped it
    (see CLOCK_KEY; None: not told, read on the reader's own clock) and its digest as stored (see _digests; "" where
    no lead is told): a write keeps an entry it left as read on the clock it was stored on, byte for byte, under the
    same digest."""

    entries: dict[Holder | Waiter | Released, _Told] = field(default_factory=dict)
    limits: dict[str, tuple[OwnerLimits, _Told]] = field(default_factory=dict)  # by owner

    def of(self, entry: Stamped, owner: str) -> _Told | None:
        """The lead of ``entry``'s writer and its digest as stored, when it is as read (``owner``: whose limits, if
        they are limits); None when it is not."""
        if isinstance(entry, OwnerLimits):
            # (unhashable: a dict in it; and its digest names its owner)
            read = self.limits.get(owner)
            return read[1] if read is not None and read[0] == entry else None
        return self.entries.get(entry)


class BudgetContention(TransientError):
    """Every write of an update lost its race (409, 404): nothing was written. Retried later by a step; a
    person told so (``nodecycle budget release``)."""


class ConfigMapBudgetStore:
    """The budget document in one ConfigMap, replaced with its ``resourceVersion`` (optimistic concurrency).

    The ConfigMap is shipped with the RBAC (``deploy/rbac.yaml``), never created here: a missing one raises
    :class:`BudgetNotInstalled`, which names it and the fix. A write that loses a race (409: the ConfigMap
    changed; 404: it was deleted meanwhile) runs the whole read-mutate-write again after a jittered backoff, up to
    ``max_attempts`` times; then it raises :class:`BudgetContention`, and for throttling (429), server errors and
    connection errors :class:`TransientError`, so that the step is retried later: for a write that may have been
    applied (its connection lost after the request went out, a 5xx), :class:`WriteOutcomeUnknown`, which the
    budget reads back. A read or write the role may not make (403: RBAC, a namespace the RBAC does not cover)
    raises :class:`Refused`, the step's to decide on; so does a write the API server could only refuse until a person
    acts, never sent: to an immutable ConfigMap (:class:`BudgetImmutable`), or past its 1 MiB with keys the budget
    does not write (:class:`BudgetCrowdedOut`); and a write within it that the API server refused all the same (an
    admission policy's 422 or 400, a proxy's 413: :class:`BudgetWriteRefused`, in the server's words).
    """

    def __init__(
        self,
        core_v1_api_factory: CoreV1Factory,
        namespace: str,
        name: str = "nodecycle-budget",
        *,
        max_attempts: int = 8,
        backoff_seconds: float = 0.05,
        max_backoff_seconds: float = 1.0,
        sleep: Callable[[float], None] = time.sleep,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        """``wall_clock``: the clock a reader stamps its lifecycles by (the budget's), which the document's creation is
        told on (see _ahead)."""
        self._api = core_v1_api_factory
        self.namespace = namespace
        self.name = name
        self._max_attempts = max_attempts
        self._backoff = backoff_seconds
        self._max_backoff = max_backoff_seconds
        self._sleep = sleep
        self._wall_clock = wall_clock
        # How far this reader's clock runs ahead of the API server's, as its answers tell it (see _lead)
        self._clock_lead = timedelta(0)
        self._lead_lock = threading.Lock()
        # The document this store wrote last, as stored, and the lead it was written with (see _lead_of)
        self._last_written: tuple[str, timedelta] | None = None

    def read(self) -> BudgetDocument | None:
        found = self._get(self._api())
        if found is None:
            return None
        lead = self._lead_of(*found)
        doc = self._parsed(*found)
        told = _leads((found[0].data or {}).get(CLOCK_KEY))
        # (a document whose every named entry is on this reader's clock is read as stored, each entry's digest
        # uncomputed: the common case, a fleet on one clock; 2,000 waiters took 3-5 ms more a read)
        return (
            doc if set(told.values()) <= {lead} else self._document(*found, lead=lead, parsed=(doc, told))[0]
        )

    def update[T](self, mutate: Callable[[BudgetDocument | None], tuple[BudgetDocument | None, T]]) -> T:
        api = self._api()
        for attempt in range(self._max_attempts):
            if attempt:
                # full jitter: writers that collided spread out instead of colliding again in step
                self._sleep(random.uniform(0, min(self._max_backoff, self._backoff * 2**attempt)))
            found = self._get(api)
            config_map = None if found is None else found[0]
            lead = timedelta(0) if found is None else self._lead_of(*found)
            current, clocks = (None, _Clocks()) if found is None else self._document(*found, lead=lead)
            new, result = mutate(current)
            if new is current:
                return result
            assert new is not None  # only None is current when there is no ConfigMap
            # (a document this write found put there by another, or removed: its beginning, on the API server's
            # clock, kept)
            restored = None
            if found is not None and current is not None and _lost(current, found[0]) and current.created_at:
                restored = current.created_at - found[1]
            if self._write(api, config_map, new, restored=restored, lead=lead, clocks=clocks):
                return result
            log.info("the budget ConfigMap changed under us (attempt %d): reading it again", attempt + 1)
        raise BudgetContention(
            f"ConfigMap {self.namespace}/{self.name} kept changing: {self._max_attempts} conflicting writes"
        )

    def _parsed(self, config_map: Any, ahead: timedelta, date: datetime | None) -> BudgetDocument:
        """The document ``config_map`` holds, as stored (see _document)."""
        try:
            return _document(config_map, ahead, date)
        except BudgetFormatError as error:
            raise BudgetUnreadable(self.namespace, self.name, error) from None

    def _document(
        self,
        config_map: Any,
        ahead: timedelta,
        date: datetime | None,
        *,
        lead: timedelta,
        parsed: tuple[BudgetDocument, dict[str, timedelta]] | None = None,
    ) -> tuple[BudgetDocument, _Clocks]:
        """The document ``config_map`` holds, its stamps on this reader's clock, which runs ``lead`` ahead of the API
        server's (an entry whose writer's lead is told moved by the difference of the two, any other as stored: see
        CLOCK_KEY); and the clock each entry was stored on. ``parsed``: the document as stored and the leads its note
        tells, when read already."""
        doc, told = parsed or (
            self._parsed(config_map, ahead, date),
            _leads((config_map.data or {}).get(CLOCK_KEY)),
        )
        digests = _digests(doc) if told else [""] * len(_stamped(doc))
        leads = {id(e): (told.get(digest), digest) for e, digest in zip(_stamped(doc), digests, strict=True)}

        def moved(entry: Stamped) -> timedelta:
            writer = leads[id(entry)][0]
            return timedelta(0) if writer is None else lead - writer

        read = doc.on_clocks(moved)
        return read, _Clocks(
            entries={
                entry: leads[id(stored)] for entry, stored in zip(_entries(read), _entries(doc), strict=True)
            },
            limits={owner: (entry, leads[id(doc.limits[owner])]) for owner, entry in read.limits.items()},
        )

    def _lead_of(self, config_map: Any, ahead: timedelta, date: datetime | None) -> timedelta:
        """The lead ``config_map`` is read with (see _lead): the one this store's last write was stamped with while
        the document is as that write stored it. Two API server replicas whose clocks are more than CLOCK_TOLERANCE
        apart tell leads that far apart: a write whose answer was lost, read back from the other replica, was read
        on another lead, its stamps moved by the difference, and not known as landed (DisruptionBudget._landed): the
        step failed, its waiters woken only at its retry."""
        lead = self._lead(ahead, date)
        with self._lead_lock:
            last = self._last_written
        text = (getattr(config_map, "data", None) or {}).get(DATA_KEY)
        return last[1] if last is not None and text == last[0] else lead

    def _lead(self, ahead: timedelta, date: datetime | None) -> timedelta:
        """How far this reader's clock runs ahead of the API server's, an answer measuring it ``ahead`` (``date``:
        the answer's Date; None, not told: the lead as it was). Every stamp of the budget is stored on its writer's clock
        with its writer's lead (see CLOCK_KEY), and read on the reader's, by way of the API server's: a drain function whose clock ran 5
        minutes behind the others' stamped its renewals 5 minutes old in their view, and they took its slot for
        expired and granted it again while its drain evicted (invariant 1), under any TTL below 5 minutes and a
        third of itself. A lead within CLOCK_TOLERANCE is none."""
        with self._lead_lock:
            if date is not None and abs(ahead - self._clock_lead) > CLOCK_TOLERANCE:
                if abs(ahead) > CLOCK_TOLERANCE:
                    log.warning(
                        "this function's clock runs %.1f s ahead of the API server's: the budget's stamps are "
                        "told with it",
                        ahead.total_seconds(),
                    )
                # (to the second, as the Date tells it: a stamp moved keeps its length, which the document's bound
                # counts on the reader's clock)
                told = timedelta(seconds=round(ahead.total_seconds()))
                self._clock_lead = told if abs(ahead) > CLOCK_TOLERANCE else timedelta(0)
            return self._clock_lead

    def _get(self, api: Any) -> tuple[Any, timedelta, datetime | None] | None:
        """The ConfigMap (None: there is none), how far this reader's clock runs ahead of the API server's, and the
        API server's time of its answer (None: not told)."""
        with forbidden_refused(), kube_errors(f"reading ConfigMap {self.namespace}/{self.name}"):
            try:
                config_map, _, headers = api.read_namespaced_config_map_with_http_info(
                    self.name, self.namespace, _request_timeout=REQUEST_TIMEOUT
                )
            except ApiException as error:
                if error.status == 404:
                    return None
                raise
        received = self._wall_clock()
        return config_map, _ahead(headers, received), server_date(headers)

    def _write(
        self,
        api: Any,
        config_map: Any,
        doc: BudgetDocument,
        *,
        restored: datetime | None = None,
        lead: timedelta = timedelta(0),
        clocks: _Clocks = _Clocks(),
    ) -> bool:
        """Replace; False when another writer came first. ``restored``: the beginning of a document put there by
        another, which this write is the first to find (see RESTORED_KEY). ``lead``: how far the writer's clock,
        which stamped ``doc`` and on which it is stored (see CLOCK_KEY), runs ahead of the API server's (see _lead);
        but for the entries of ``doc`` as ``clocks`` read them, stored as they were."""
        with forbidden_refused(), kube_errors(f"writing ConfigMap {self.namespace}/{self.name}"):
            try:
                if config_map is None:
                    # nodecycle may not create ConfigMaps (that right would reach kube-system/aws-auth): the
                    # budget is shipped, empty, with the RBAC, and a missing one is a deployment mistake.
                    raise BudgetNotInstalled(self.namespace, self.name)
                if getattr(config_map, "immutable", None):
                    # (a write would only be refused: 422, field is immutable)
                    raise BudgetImmutable(self.namespace, self.name)
                # the object as read: its resourceVersion makes the replace conditional, and labels,
                # annotations or other keys someone added survive
                if restored is not None:
                    config_map.data = {**(config_map.data or {}), RESTORED_KEY: _rfc3339(restored)}
                # (an entry as read stored as it was, under its writer's lead and digest; any other on this
                # writer's clock, as it stamped it, named with its lead)
                owners = {id(limits): owner for owner, limits in doc.limits.items()}
                told: dict[int, timedelta | None] = {}
                notes: list[tuple[int, str]] = []
                holders_told: list[str] = []  # (the digests of the holders whose writer's lead is told)
                for entry in _stamped(doc):
                    kept = clocks.of(entry, owners.get(id(entry), ""))
                    writer, digest = kept or (lead, _digest(entry, owners.get(id(entry), "")))
                    told[id(entry)] = writer
                    if writer is not None:
                        notes.append((int(writer.total_seconds()), digest))
                        if isinstance(entry, Holder):
                            holders_told.append(digest)

                def moved(entry: Stamped) -> timedelta:
                    writer = told[id(entry)]
                    return timedelta(0) if writer is None else writer - lead

                text = doc.on_clocks(moved).to_json()
                config_map.data = _with_document(config_map, text, notes)
                binary = _binary_bytes(config_map)
                others = {**_others_keys(config_map.data), **binary}
                size = _data_bytes(config_map.data) + sum(binary.values())
                if size > CONFIGMAP_MAX_BYTES >= size - sum(others.values()):
                    # (a write would only be refused, 422 Too long, until a person moves them out)
                    raise BudgetCrowdedOut(self.namespace, self.name, len(text.encode()), others)
                if others and not _names(config_map.data, holders_told):
                    # A holder's lead left out of the note for want of room: read on each reader's own clock, a
                    # holder renewed by a clock minutes behind is expired in the others' view, its slot granted again
                    # while its drain evicts (invariant 1). Refused if it is the others' keys that take the room.
                    alone = {key: value for key, value in config_map.data.items() if key not in others}
                    without = SimpleNamespace(data=alone, metadata=config_map.metadata)
                    if _names(_with_document(without, text, notes), holders_told):
                        raise BudgetCrowdedOut(self.namespace, self.name, len(text.encode()), others)
                with self._lead_lock:
                    self._last_written = (text, lead)
                try:
                    api.replace_namespaced_config_map(
                        self.name,
                        self.namespace,
                        config_map,
                        field_manager=UNSEEDED_MANAGER if doc.unvouched or doc.unwritten else FIELD_MANAGER,
                        _request_timeout=REQUEST_TIMEOUT,
                    )
                except HTTPError as error:
                    # The request may have gone out and been applied, its answer lost with the connection (a
                    # read timeout, a connection closed before the response): the budget reads it back
                    raise WriteOutcomeUnknown(
                        f"writing ConfigMap {self.namespace}/{self.name}, no answer: {error}"
                    ) from error
            except ApiException as error:
                if error.status in (404, 409):  # deleted or changed since it was read: read it again
                    return False
                if (error.status or 0) >= 500:
                    # a server that failed mid-way (an etcd timeout, a gateway's) may have applied it
                    raise WriteOutcomeUnknown(
                        f"writing ConfigMap {self.namespace}/{self.name}: HTTP {error.status} {_message(error)}",
                        retry_after=retry_after(error),
                    ) from error
                data_bytes = _data_bytes(config_map.data or {}) + sum(_binary_bytes(config_map).values())
                if (
                    error.status in (400, 413, 422) or (error.status == 403 and _admission_denied(error))
                ) and data_bytes <= CONFIGMAP_MAX_BYTES:
                    # Not the size (the store refuses the two causes it can see before it writes): a policy's or a
                    # proxy's answer to this write, which no retry changes (a webhook's deny is a 403 on today's
                    # kube-apiserver, not the role's RBAC: told as the write's refusal, not a role to fix)
                    raise BudgetWriteRefused(
                        self.namespace, self.name, error.status, _message(error), data_bytes
                    ) from error
                if error.status in (413, 422):
                    # Too large: the same write would fail again. The domain bounds the document (its queue's
                    # maximum), so this is a document no version of nodecycle should write, or forced slots past
                    # the bound that shrinks as their drains give them back: say what the server said and how big
                    # it was, and let the step retry later.
                    size = len(doc.to_json())
                    log.error(
                        "the API server refused the budget ConfigMap %s/%s (%d bytes): %s",
                        self.namespace,
                        self.name,
                        size,
                        _message(error),
                    )
                    raise TransientError(
                        f"the API server refused ConfigMap {self.namespace}/{self.name} ({size} bytes): "
                        f"{_message(error)}"
                    ) from error
                raise
        return True


class KubeNodeInventory:
    """The nodes in the budget's scope: those matching a label selector (all nodes when it is empty).

    Only what the budget needs is read, and not on every poll:

    - without ``with_status`` (percent limits alone), each node's metadata (its name and zone label), as a
      ``PartialObjectMetadataList``; with it (counting unavailable nodes), whole nodes, whose cordon,
      shutdown taint and Ready condition are in spec and status. So only an owner counting unavailable nodes
      leaves the nodes of stopped instances out of scope; the metadata of one cannot tell. (The lingering
      nodes of instances whose drain ended leave the scope by the budget document's marks, in both modes:
      see ``limits.in_scope``);
    - with ``resourceVersion=0``, from the API server's watch cache rather than from etcd;
    - at most once per ``max_age`` per container: a cached list serves the budget's decisions in between.

    Why stale counts are safe: the budget re-resolves its limits at every grant, renewal and release, and
    the holders it counts (nodecycle's own disruption) are read fresh from the ConfigMap at every write, so
    no grant can exceed the limits the counts give. A count at most ``max_age`` old can only make a percent
    limit lag behind nodes that joined or left within ``max_age`` (ceil(p x that many) slots at most: none
    for a steady group), and a node another tool cordoned or that went NotReady within ``max_age`` is
    counted that much later, as it would be if it changed just after a fresh list. ``max_age`` must stay
    well under the time a group's size or health takes to change much: a minute for counts, seconds for
    states (see the drain's wiring). The list itself is the watch cache's, which lags etcd by its own delay
    (milliseconds; seconds under load; "much older" is all the API's documentation promises of
    ``resourceVersion=0``): a node cordoned or gone NotReady within that delay too is not counted yet, and a
    counting owner may grant the slot it took, as the sandbox's lagging_watch_cache shows.

    The cache's age is measured on the wall clock: a Lambda environment frozen between invocations may see
    its monotonic clock stand still, and would trust an hours-old list.
    """

    def __init__(
        self,
        core_v1_api_factory: CoreV1Factory,
        label_selector: str = "",
        max_age: timedelta = timedelta(seconds=10),
        *,
        with_status: bool = True,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self._api = core_v1_api_factory
        self._selector = label_selector
        self._max_age = max_age.total_seconds()
        self._with_status = with_status
        self._wall_clock = wall_clock
        self._lock = threading.Lock()
        self._cached: tuple[float, list[NodeState]] | None = None

    def nodes_in_scope(self) -> list[NodeState]:
        with self._lock:
            now = self._wall_clock()
            if self._cached is None or not 0 <= now - self._cached[0] < self._max_age:
                self._cached = (now, self._list())
            return list(self._cached[1])

    def _list(self) -> list[NodeState]:
        read = _node_state if self._with_status else _node_metadata
        found = pages(
            self._api().list_node,
            "listing nodes",
            metadata_only=not self._with_status,
            label_selector=self._selector,
            _request_timeout=REQUEST_TIMEOUT,
        )
        return [read(item) for item in found]


class KubeDrainsInProgress:
    """The drains in progress the nodes show, for a budget document never written (see
    :mod:`nodecycle.domain.budget.seed`): every node's metadata (its annotations and zone label), one paged
    consistent list, with no label selector (a holder counts in every stack's view, in its scope or not).
    Listed only when the budget's ConfigMap holds no document.

    Consistent, not from the watch cache (``resourceVersion=0``): the cache may lag behind etcd, by seconds under
    load, and miss a drain that claimed its node just before the ConfigMap was deleted, which, left out of the
    seed, would have its slot granted again while it evicts (invariant 1). A list of this kind is rare (once
    per document created), so a read from etcd costs little."""

    def __init__(self, core_v1_api_factory: CoreV1Factory) -> None:
        self._api = core_v1_api_factory

    def drains_in_progress(self) -> list[DrainInProgress]:
        with forbidden_refused():  # a role without list on nodes, as a read's
            found = pages(
                self._api().list_node,
                "listing nodes for the drains in progress",
                metadata_only=True,
                consistent=True,
                _request_timeout=REQUEST_TIMEOUT,
            )
            drains = [drain for drain in map(_drain_in_progress, found) if drain is not None]
        return drains


def _drain_in_progress(item: dict[str, Any]) -> DrainInProgress | None:
    """The drain the node's owner and in-progress annotations name; None for none (or one no stack owns, left
    to be adopted; or an annotation unreadable, which no lifecycle can renew)."""
    node = node_info(item)
    progress = node.progress()
    if node.owner is None or node.lifecycle is None:
        return None
    try:
        started = datetime.fromisoformat(str(progress.get("started")))
    except ValueError:
        started = None
    return DrainInProgress(
        node=node.name,
        zone=node.zone,
        owner=node.owner,
        instance_id=str(progress["instance"]),
        record_id=node.lifecycle,
        token=str(progress["token"]),
        started=started if started is not None and started.tzinfo is not None else None,
    )


def _zone(metadata: dict[str, Any]) -> str | None:
    """The node's zone as its drain reads it (``zone_of``, as ``node_info``). Read from the GA label alone, a node
    of the beta label only was of its zone in its drain's ask and of none in the scope: a per-zone percent of a zone
    of such nodes resolved to a zone's without nodes (1), and one counted unavailable counted against every zone
    (tests/integration/budget/test_legacy_zone_label.py)."""
    return zone_of(metadata.get("labels") or {})


def _node_metadata(node: dict[str, Any]) -> NodeState:
    """A node known by its metadata only: counted, never counted as unavailable. (Whether its instance is
    stopped is in its taints, which metadata does not carry: counted in scope all the same.)"""
    metadata = node.get("metadata") or {}
    return NodeState(
        name=metadata["name"],
        zone=_zone(metadata),
        schedulable=True,
        ready=True,
        released=RELEASED_FOR_ANNOTATION in (metadata.get("annotations") or {}),
    )


def _node_state(node: dict[str, Any]) -> NodeState:
    metadata = node.get("metadata") or {}
    spec = node.get("spec") or {}
    conditions = (node.get("status") or {}).get("conditions") or []
    taints = spec.get("taints") or []
    being_removed = any(
        t.get("key") in REMOVAL_TAINTS and t.get("effect") != "PreferNoSchedule" for t in taints
    )
    return NodeState(
        name=metadata["name"],
        zone=_zone(metadata),
        schedulable=not spec.get("unschedulable", False) and not being_removed,
        ready=any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions),
        shut_down=any(t.get("key") == SHUTDOWN_TAINT for t in taints),
        released=RELEASED_FOR_ANNOTATION in (metadata.get("annotations") or {}),
    )


def _admission_denied(error: ApiException) -> bool:
    """Whether a 403 is admission's deny (a validating webhook's or a ValidatingAdmissionPolicy's, as kube-apiserver
    words them), not RBAC's."""
    message = _message(error)
    return "admission webhook" in message or "ValidatingAdmissionPolicy" in message


def _message(error: ApiException) -> str:
    try:
        return str(json.loads(error.body or "{}").get("message") or error.reason)
    except ValueError:
        return str(error.reason)


def _with_document(config_map: Any, text: str, clocks: list[tuple[int, str]] | None = None) -> dict[str, str]:
    """The data of ``config_map`` with the document ``text``, what WRITTEN_KEY says of it and CLOCK_KEY's ``clocks``
    (each entry's writer's lead and digest, in the order of _stamped); without the keys, or with what fits of
    ``clocks`` (its first, the holders'), when they would take the ConfigMap past the API server's limit (a document
    at its worst or forced past the budget's bound: see rules.MAX_DOCUMENT_BYTES): the document goes in whole, and the
    next read judges it as any document without the note, by who set it (FIELD_MANAGER: taken as written there) or
    where that is not told by its stamps (this write's, so taken as written there too: see WRITTEN_KEY); and reads the
    entries CLOCK_KEY leaves out each on the reader's own clock (see CLOCK_KEY)."""
    data = {
        key: value for key, value in (config_map.data or {}).items() if key not in (WRITTEN_KEY, CLOCK_KEY)
    }
    data[DATA_KEY] = text
    size = sum(len(key) + len(value.encode()) for key, value in data.items())
    size += sum(_binary_bytes(config_map).values())  # (binaryData kept as read takes its room too)
    written = _written(config_map.metadata, text)
    if size + len(WRITTEN_KEY) + len(written) <= CONFIGMAP_MAX_BYTES:
        data[WRITTEN_KEY] = written
        size += len(WRITTEN_KEY) + len(written)
    value = _clock_lines(clocks or [], CONFIGMAP_MAX_BYTES - size - len(CLOCK_KEY))
    if value:
        data[CLOCK_KEY] = value
    return data


def _names(data: dict[str, str], digests: list[str]) -> bool:
    """Whether the note of ``data`` (CLOCK_KEY) tells the lead of every entry of ``digests``."""
    return set(digests) <= _leads(data.get(CLOCK_KEY)).keys()


def _data_bytes(data: dict[str, str]) -> int:
    """The bytes of ``data`` as the API server counts them against CONFIGMAP_MAX_BYTES: its values' (not its keys')."""
    return sum(len(value.encode()) for value in data.values())


def _binary_bytes(config_map: Any) -> dict[str, int]:
    """The bytes of each key of ``config_map``'s binaryData (never the budget's) as the API server counts them
    against CONFIGMAP_MAX_BYTES beside data's values: decoded (a compressed backup put there took the room unseen,
    and every write was refused, 422 Too long, as a transient error logged as the document too large)."""
    return {
        key: len(str(value or "").rstrip("=")) * 3 // 4
        for key, value in (getattr(config_map, "binary_data", None) or {}).items()
    }


def _others_keys(data: dict[str, str]) -> dict[str, int]:
    """The bytes of each key of ``data`` the budget does not write."""
    return {
        key: len(value.encode())
        for key, value in data.items()
        if key not in (DATA_KEY, WRITTEN_KEY, CLOCK_KEY, RESTORED_KEY)
    }


def _clock_lines(clocks: list[tuple[int, str]], room: int) -> str:
    """CLOCK_KEY's value for ``clocks`` (each entry's writer's lead in seconds and digest): as many of them, first
    first, as fit in ``room`` bytes."""
    by_lead: dict[int, list[str]] = {}
    used = 0
    for lead, digest in clocks:
        cost = len(digest) + 1 + (0 if lead in by_lead else len(str(lead)) + 1)
        if used + cost > room:
            break
        used += cost
        by_lead.setdefault(lead, []).append(digest)
    return "\n".join(" ".join((str(lead), *digests)) for lead, digests in sorted(by_lead.items()))


def _leads(value: object) -> dict[str, timedelta]:
    """The leads CLOCK_KEY tells, by digest (a line that is not one, edited by hand, tells nothing; nor does one whose
    lead is more than MAX_LEAD: taken at its word, it failed every read, a stamp moved past the years a time can
    tell, or moved a holder years ahead, expired as renewed further ahead than any clock runs)."""
    leads: dict[str, timedelta] = {}
    for line in str(value or "").splitlines():
        lead, _, digests = line.strip().partition(" ")
        try:
            seconds = int(lead)
        except ValueError:
            continue
        if abs(seconds) <= MAX_LEAD.total_seconds():
            leads.update(dict.fromkeys(digests.split(), timedelta(seconds=seconds)))
    return leads


def _entries(doc: BudgetDocument) -> list[Holder | Waiter | Released]:
    return [*doc.holders, *doc.waiters, *doc.released]


def _stamped(doc: BudgetDocument) -> list[Stamped]:
    """The entries of ``doc`` that carry its writers' stamps, those whose clock matters most first (see
    _with_document): the holders (read on the wrong clock, a slot expires while its drain evicts), the slots given
    back, the owners' limits, and the waiters last (their places in line)."""
    return [*doc.holders, *doc.released, *doc.limits.values(), *doc.waiters]


def _digests(stored: BudgetDocument) -> list[str]:
    """The digest of each entry of ``stored`` that carries stamps, as stored (in the order of _stamped: see _digest)."""
    owners = {id(limits): owner for owner, limits in stored.limits.items()}
    return [_digest(entry, owners.get(id(entry), "")) for entry in _stamped(stored)]


def _digest(entry: Stamped, owner: str = "") -> str:
    """The digest of ``entry`` as stored (``owner``: whose limits, if they are limits): its node (its owner, for
    limits) and its stamps, to the microsecond, hashed, 64 bits of it. A writer that restamps an entry gives it
    another; one that keeps its stamps keeps it (its other fields, a waiter's precedence, are no writer's clock)."""

    def us(stamp: datetime) -> int:
        return (stamp - _EPOCH) // _MICROSECOND

    match entry:
        case Holder():
            key = f"h {entry.node} {us(entry.renewed_at)} {us(entry.acquired_at)}"
        case Released():
            key = f"r {entry.node} {us(entry.released_at)}"
        case OwnerLimits():
            key = f"l {owner} {us(entry.updated_at)}"
        case Waiter():
            key = f"w {entry.node} {us(entry.renewed_at)} {us(entry.waiting_since)}"
    return hashlib.blake2b(key.encode(), digest_size=8).hexdigest()


def _written(metadata: Any, text: str) -> str:
    """What WRITTEN_KEY says of ``text`` written to the object of ``metadata``."""
    return f"{getattr(metadata, 'uid', None)} {hashlib.sha256(text.encode()).hexdigest()}"


def _rfc3339(value: datetime) -> str:
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _restored(data: dict[str, Any]) -> datetime | None:
    """When a document put there by another was found in the ConfigMap last, as RESTORED_KEY says (None: never, or
    not a time: a key edited by hand says nothing)."""
    try:
        value = datetime.fromisoformat(str(data.get(RESTORED_KEY)))
    except ValueError:
        return None
    return value if value.tzinfo is not None else None


def _ahead(headers: Any, received: float) -> timedelta:
    """How far the reader's clock (``received``: when the answer came) runs ahead of the API server's, as the answer
    tells (its Date header, which kube-apiserver sends with every answer); zero when not told. The Date is to the
    second and stamped before the answer went out: the reader's lead comes out up to a second (and the answer's way)
    more than it is, which takes the creation on the reader's clock that much later: the side on which more
    lifecycles are taken to have begun before it (a record read, never a late delivery unjudged)."""
    date = server_date(headers)
    return timedelta(0) if date is None else timedelta(seconds=received - date.timestamp())


def _document(
    config_map: Any, ahead: timedelta = timedelta(0), date: datetime | None = None
) -> BudgetDocument:
    """The document ``config_map`` holds, its beginning told on the clock of a reader ``ahead`` of the API server's
    (``date``: the API server's time of the answer that carried it)."""
    data = config_map.data or {}
    text = data.get(DATA_KEY)
    metadata = getattr(config_map, "metadata", None)
    # An empty ConfigMap (as shipped; made by hand, or by a GitOps tool to own its namespace; created again after
    # a deletion) is an empty budget, never written: its first write seeds it (see DisruptionBudget). So is one
    # whose document was not written to it by this version (restored, re-applied: see WRITTEN_KEY)
    # (when the ConfigMap was created: the marks of the slots given back before then went with the one before it)
    created = _aware(getattr(metadata, "creation_timestamp", None))
    # (and when a document put there by another was found in it last: what the budget wrote before then may be missing
    # from it, as from a ConfigMap created again: see RESTORED_KEY)
    begun = _latest(created, _restored(data)) if created is not None else None
    if not text:
        doc = BudgetDocument(unwritten=True)
        if WRITTEN_KEY in data:
            # (a stack's note beside no document: the document was removed since, by hand, as BudgetUnreadable says to)
            begun = _latest(begun, date)
    else:
        doc = BudgetDocument.from_json(text)
        if not _vouched(doc, text, data.get(WRITTEN_KEY), metadata, created):
            doc = doc.model_copy(update={"unvouched": True})
            # (put there when it was set, as the API server tells; or not told, at the latest now)
            begun = _latest(begun, _document_set_at(metadata) or date)
    # (on the reader's clock, as the lifecycles' beginnings it is compared with are: a clock ahead of the API server's
    # by more than rules.CREATION_MARGIN took a lifecycle begun just before the creation for one begun after it)
    return doc if begun is None else doc.model_copy(update={"created_at": begun + ahead})


def _lost(doc: BudgetDocument, config_map: Any) -> bool:
    """Whether ``doc``, read from ``config_map``, lost what the budget wrote before (see RESTORED_KEY): a document
    put there by another, or none where a stack's note says one was (removed by hand)."""
    return doc.unvouched or (doc.unwritten and WRITTEN_KEY in (config_map.data or {}))


def _vouched(
    doc: BudgetDocument, text: str, said: str | None, metadata: Any, created: datetime | None
) -> bool:
    """Whether ``doc`` (``text``, whose note says ``said``) is the budget's own: set by a stack's write to this
    object (see WRITTEN_KEY)."""
    setters = _setters(metadata)
    document_by = setters.get(DATA_KEY)
    if document_by is not None:
        if document_by != FIELD_MANAGER:
            return False  # put there by a tool or a person
        note_by = setters.get(WRITTEN_KEY)
        if said is None or note_by is None:
            # a stack before the note, or this one past the API server's limit; (a note of nobody's: its digest)
            return said is None or said == _written(metadata, text)
        # (a note a stack set: its digest is another when an older stack wrote the document since)
        return note_by == FIELD_MANAGER and said.split(" ", 1)[0] == str(getattr(metadata, "uid", None))
    if said is not None:
        return said == _written(metadata, text)
    return not _not_written_since(doc, _latest(created, _document_set_at(metadata)))


def _setters(metadata: Any) -> dict[str, str]:
    """The manager that set each of the document's keys last, as the API server tells (managedFields). A server-side
    apply's entry (operation ``Apply``) is never a stack's, whose writes are replaces (``Update``), whatever manager
    name it was sent under (``kubectl apply --server-side --field-manager=nodecycle`` of a saved manifest): it is
    told by the name and the operation, which no stack's write has."""
    setters: dict[str, str] = {}
    for entry in getattr(metadata, "managed_fields", None) or ():
        fields = getattr(entry, "fields_v1", None)
        data = fields.get("f:data") if isinstance(fields, dict) else None
        manager = str(getattr(entry, "manager", None))
        if getattr(entry, "operation", None) == "Apply":
            manager = f"{manager} (Apply)"
        for key in (DATA_KEY, WRITTEN_KEY):
            if isinstance(data, dict) and f"f:{key}" in data:
                setters[key] = manager
    return setters


def _not_written_since(doc: BudgetDocument, set_at: datetime | None) -> bool:
    """Whether no writer stamped ``doc`` when it was set, at ``set_at`` by the API server's clock (False when not
    told): every write stamps it (its owner's limits at least, a release its mark), and a writer's clock runs at most
    MAX_CLOCK_AHEAD behind the API server's (see WRITTEN_KEY)."""
    if set_at is None:
        return False
    stamped = doc.last_stamped()
    return stamped is None or stamped < set_at - MAX_CLOCK_AHEAD


def _document_set_at(metadata: Any) -> datetime | None:
    """When the document was set last, as the API server tells: the time of the managedFields entry that owns it (its
    manager's last write that changed a field; None when not told: no managedFields, a server that keeps none)."""
    for entry in getattr(metadata, "managed_fields", None) or ():
        fields = getattr(entry, "fields_v1", None)
        data = fields.get("f:data") if isinstance(fields, dict) else None
        if isinstance(data, dict) and f"f:{DATA_KEY}" in data:
            return _aware(getattr(entry, "time", None))
    return None


def _latest(*times: datetime | None) -> datetime | None:
    return max((t for t in times if t is not None), default=None)


def _aware(value: object) -> datetime | None:
    """A time the client read from the API server, in UTC (None: not a time)."""
    if not isinstance(value, datetime):
        return None
    return value if value.tzinfo else value.replace(tzinfo=UTC)
