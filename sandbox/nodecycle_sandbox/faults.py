"""Fault injection, the shared part: what a fault is, and the seeded dice that decide when one fires.

Every injector (the Kubernetes API server's ``kube/faults.py``, the AWS endpoint's ``aws/faults.py``, the
runner's ``runner/faults.py``) is armed with a list of :class:`Fault` rules and a seed, and is off until then.
A rule fires on an eligible request with its probability, inside its time window and up to its limit; every
firing is counted by kind and kept (:class:`Firing`), so a run can report what it injected and a failing
run can be replayed with fewer faults.

The dice are one ``random.Random`` per injector, seeded from the run's seed and the injector's name: the same
seed draws the same sequence of decisions, though which request meets which decision still depends on the
threads' interleaving, as on a real cluster.
"""

from __future__ import annotations

import fnmatch
import random
import threading
import time
from collections import Counter
from dataclasses import asdict, dataclass
from typing import Any

# The kinds, by where they are injected.
KUBE_KINDS = (
    "kube-conflict",
    "kube-throttle",
    "kube-error",
    "kube-slow",
    "kube-hang",
    "kube-drop",
    "kube-lost-response",
    "kube-cut-answer",
)
# Refusals: the request was understood and judged, and the answer is no (for a while), not "try again".
KUBE_REFUSAL_KINDS = ("kube-webhook-down", "kube-webhook-deny", "kube-forbidden")
AWS_KINDS = ("aws-throttle", "aws-error", "aws-lost-answer")
AWS_REFUSAL_KINDS = ("aws-denied",)
# Another update of the same resource pending at that moment (aws/faults.py): Auto Scaling's writes only
AUTOSCALING_CONTENTION_KINDS = ("aws-contention",)
# Another writer's transaction on the same item at that moment (aws/faults.py): DynamoDB's writes only
AWS_CONFLICT_KINDS = ("dynamodb-conflict",)
DYNAMODB_KINDS = ("dynamodb-index-lag",)  # the service's own lag, not a refusal (aws/dynamodb_index_lag.py)
SQS_KINDS = ("sqs-duplicate", "sqs-delay", "sqs-reorder", "sqs-drop")
EVENT_KINDS = ("event-duplicate", "event-delay")
WORKER_KINDS = ("worker-kill", "clock-skew", "time-travel")
# Set by the campaign's world itself at a moment of its story (chaos/world.py), not drawn per request by an
# injector: a node's container runtime that hangs, an Elastic IP that AWS locks.
WORLD_KINDS = ("kube-hung-runtime", "eip-locked")
# Set and lifted by the campaign's world too (chaos/outages.py): an event source mapping disabled, a function's
# role without its policy, a third writer of the budget ConfigMap, the scenario's PodDisruptionBudget's status
# written by others at every eviction's try; the budget ConfigMap deleted and created again empty (``kubectl replace
# --force`` of deploy/rbac.yaml); and, once the story is over, a work message replayed hours later.
OUTAGE_KINDS = (
    "mapping-paused",
    "iam-detached",
    "budget-third-writer",
    "work-replay",
    "kube-budget-contended",
    "budget-recreated",
)
KINDS = (
    *KUBE_KINDS,
    *KUBE_REFUSAL_KINDS,
    *AWS_KINDS,
    *AWS_REFUSAL_KINDS,
    *AUTOSCALING_CONTENTION_KINDS,
    *AWS_CONFLICT_KINDS,
    *DYNAMODB_KINDS,
    *SQS_KINDS,
    *EVENT_KINDS,
    *WORKER_KINDS,
    *WORLD_KINDS,
    *OUTAGE_KINDS,
)
# What the runner's own clients add to their User-Agent. Its event source mappings poll with the function's
# key, as Lambda does (IAM judges them by the function's role), but AWS faults are for nodecycle's calls:
# Lambda's pollers retry on their own, and nothing nodecycle does could answer a poller refused.
RUNNER_AGENT = "nodecycle-sandbox-runner"


@dataclass(frozen=True)
class Fault:
    """One rule of a fault plan.

    ``target`` is a glob over what the injector names its requests: ``"PATCH nodes"``, ``"* configmaps"``,
    ``"POST pods/eviction"`` (Kubernetes: method and resource); ``"autoscaling.CompleteLifecycleAction"``,
    ``"ec2.*"`` (AWS: service and operation); ``"DrainQueue"`` (SQS: the queue's logical id);
    ``"DrainFunction"`` (workers, and events: the function's logical id). ``value`` is the kind's amount:
    seconds of delay (``kube-slow``, ``sqs-delay``, ``event-delay``), of skew (``clock-skew``, ``time-travel``), of ``Retry-After`` (``kube-throttle``), or the
    API call after which a worker dies (``worker-kill``: 1 = right after its first call).
    """

    id: str
    kind: str
    target: str = "*"
    probability: float = 1.0
    start: float = 0.0  # seconds after arming
    stop: float | None = None  # seconds after arming; None: for as long as the plan is armed
    limit: int | None = None  # fires at most this often; None: no limit
    value: float = 0.0

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"unknown fault kind {self.kind!r}; known: {', '.join(KINDS)}")
        if not 0.0 <= self.probability <= 1.0:
            raise ValueError(f"fault {self.id}: probability {self.probability} is not within [0, 1]")

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Fault:
        return cls(**data)

    def describe(self) -> str:
        window = (
            f" {self.start:g}-{'' if self.stop is None else f'{self.stop:g}'}s"
            if self.start or self.stop
            else ""
        )
        limit = "" if self.limit is None else f" x{self.limit}"
        value = f" ={self.value:g}" if self.value else ""
        return f"{self.id} {self.kind}[{self.target}] p={self.probability:g}{value}{window}{limit}"


@dataclass(frozen=True)
class Firing:
    """A fault that fired: when (seconds after arming), which rule, and on what."""

    at: float
    fault: str
    kind: str
    detail: str


class Injector:
    """The dice and the books of one injection point. Thread-safe; disarmed (inert) until ``arm``."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._lock = threading.Lock()
        self._faults: tuple[Fault, ...] = ()
        self._random = random.Random(0)
        self._armed_at = 0.0
        self._fired: Counter[str] = Counter()  # by fault id
        self._firings: list[Firing] = []

    def arm(self, faults: list[Fault] | tuple[Fault, ...], seed: int) -> None:
        """Start a plan (replacing any other): the clock of its windows starts now; the books are cleared."""
        with self._lock:
            self._faults = tuple(faults)
            self._random = random.Random(f"{seed}:{self._name}")
            self._armed_at = time.monotonic()
            self._fired.clear()
            self._firings = []

    def disarm(self) -> None:
        with self._lock:
            self._faults = ()

    @property
    def armed(self) -> bool:
        return bool(self._faults)

    def draw(self, kinds: tuple[str, ...], name: str, detail: str = "") -> Fault | None:
        """The first rule of ``kinds`` that fires for a request named ``name``, or None. Each eligible rule
        throws its own die, so one rule's probability does not depend on the others'."""
        if not self._faults:
            return None
        with self._lock:
            now = time.monotonic() - self._armed_at
            for fault in self._faults:
                if fault.kind not in kinds or not fnmatch.fnmatchcase(name, fault.target):
                    continue
                if now < fault.start or (fault.stop is not None and now >= fault.stop):
                    continue
                if fault.limit is not None and self._fired[fault.id] >= fault.limit:
                    continue
                if self._random.random() >= fault.probability:
                    continue
                self._fired[fault.id] += 1
                self._firings.append(Firing(round(now, 3), fault.id, fault.kind, detail or name))
                return fault
            return None

    def uniform(self, low: float, high: float) -> float:
        """A draw from the same seeded dice (e.g. which message of a batch a fault picks)."""
        with self._lock:
            return self._random.uniform(low, high)

    def shuffle(self, items: list[Any]) -> None:
        with self._lock:
            self._random.shuffle(items)

    def firings(self) -> list[Firing]:
        with self._lock:
            return list(self._firings)

    def counts(self) -> dict[str, int]:
        """Faults fired so far, by kind."""
        with self._lock:
            return dict(Counter(f.kind for f in self._firings))
