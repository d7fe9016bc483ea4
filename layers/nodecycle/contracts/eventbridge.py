"""The envelope every EventBridge event comes in.

Our own model rather than Powertools' ``EventBridgeModel``: importing that one loads the parser utility
with it, about 0.07-0.1 s of CPU on every cold start of the intake function (measured:
``python -m benchmarks --only cold``), for ten plain fields this module declares just as well.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from nodecycle.contracts.times import AwsTime


class EventBridgeEnvelope(BaseModel):
    """The fields EventBridge puts around every event's ``detail`` (``detail`` is typed by subclasses)."""

    model_config = ConfigDict(populate_by_name=True)

    version: str
    # EventBridge writes a UUID. Bounded because what comes by the intake queue (1 MiB) is not EventBridge's: a
    # disruption's id is its record's token, and an id larger than the item can hold (400 KB) would fail the
    # write at every retry until the dead-letter queue.
    id: str = Field(max_length=128)
    source: str
    account: str
    time: AwsTime  # EventBridge writes UTC with its Z; a time without a zone is not EventBridge's
    region: str
    resources: list[str]
    detail_type: str = Field(alias="detail-type")
    detail: Any
    replay_name: str | None = Field(None, alias="replay-name")
