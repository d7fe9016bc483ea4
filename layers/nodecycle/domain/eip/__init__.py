"""Elastic IPs that follow the instance: the ASSIGN_EIP and RELEASE_EIP steps (the sweeper's part is in
:mod:`nodecycle.domain.sweep.addresses`).

Everything here talks to EC2 through the :class:`~nodecycle.domain.ports.addresses.Addresses` port and decides
by the tags nodecycle writes when it allocates (owner, instance, group, allocated-at, pool), not by the
current settings: a pool address is never released, and an address of another owner is never touched.
"""

from __future__ import annotations

from typing import Any

from nodecycle.domain.model import LifecycleRecord

# The EIP steps keep what they must remember between two runs of a step under this key of record.extra.
SCRATCH = "eip"


def without_scratch(record: LifecycleRecord) -> dict[str, Any]:
    """The record's extra without the EIP steps' scratch: what a step that is done leaves behind."""
    return {key: value for key, value in record.extra.items() if key != SCRATCH}
