"""Terminated instances that EC2 forgets, and instances started again that EC2 says were launched then.

EC2 lists a terminated instance for about an hour, then no more (TerminateInstances in the EC2 API reference:
"Terminated instances remain visible after termination (for approximately one hour)"): DescribeInstances
filtered by its id answers nothing, and DescribeInstances or DescribeInstanceStatus naming it answers
``InvalidInstanceID.NotFound``. moto kept terminated instances for ever, so nothing in the sandbox ever met an
instance EC2 no longer knows.

The retention (``RETENTION_SECONDS`` unless ``set_retention`` or ``AwsControl.configure`` changed it for a
backend) counts from the instance's first termination. Forgotten instances go when the backend next reads its
reservations.

An instance started again (out of the stopped state) has the start's ``LaunchTime``, as EC2 shows it ("the time
the instance was launched", which a stop and a start move on; nodecycle tells a stopped instance started again by
it). moto kept the first launch's time for ever.
"""

from __future__ import annotations

import time
from typing import Any

from moto.core.utils import utcnow
from moto.ec2.models.instances import Instance, InstanceBackend, InstanceState

RETENTION_SECONDS = 3600.0
_MARKER = "_nodecycle_sandbox_instances"
_TERMINATED_AT = "_nodecycle_terminated_at"
_RETENTION = "_nodecycle_terminated_retention"


def install() -> None:
    """Idempotent: a second call changes nothing."""
    if getattr(Instance, _MARKER, False):
        return
    original_terminate = Instance.terminate
    original_start = Instance.start
    original_reservations = InstanceBackend.all_reservations

    def start(self: Instance) -> InstanceState:
        stopped = self._state.name != "running"
        previous = original_start(self)
        if stopped:
            self.launch_time = utcnow()
        return previous

    def terminate(self: Instance) -> InstanceState:
        if getattr(self, _TERMINATED_AT, None) is None:
            setattr(self, _TERMINATED_AT, time.time())
        return original_terminate(self)

    def all_reservations(self: InstanceBackend, filters: Any = None) -> Any:
        forget_expired(self)
        return original_reservations(self, filters)

    Instance.terminate = terminate  # type: ignore[method-assign]
    Instance.start = start  # type: ignore[method-assign]
    InstanceBackend.all_reservations = all_reservations  # type: ignore[method-assign]
    setattr(Instance, _MARKER, True)


def set_retention(ec2_backend: Any, seconds: float) -> None:
    """How long ``ec2_backend`` lists an instance after its termination."""
    setattr(ec2_backend, _RETENTION, float(seconds))


def forget_expired(backend: Any, now: float | None = None) -> None:
    """Drop the instances terminated longer ago than the backend's retention (and reservations left empty)."""
    moment = time.time() if now is None else now
    retention = float(getattr(backend, _RETENTION, RETENTION_SECONDS))
    for reservation_id, reservation in list(backend.reservations.items()):
        kept = [
            instance
            for instance in reservation.instances
            if (terminated_at := getattr(instance, _TERMINATED_AT, None)) is None
            or terminated_at + retention > moment
        ]
        if len(kept) == len(reservation.instances):
            continue
        if kept:
            reservation.instances = kept
        else:
            del backend.reservations[reservation_id]
