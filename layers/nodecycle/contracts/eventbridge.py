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

    # defer_build (inherited by each event's model): a model's validator is built at its first use, not at the
    # cold start's import. The envelope alone is never validated, and an intake invocation reads one kind of
    # event: one that takes in lifecycle actions never builds the disruption events' models, and the other way
    # round (``python -m benchmarks --only cold``: import, and import with the first invocation's parse).
    model_config = ConfigDict(populate_by_name=True, defer_build=True)

    version: str
    # EventBridge writes a UUID. Bounded because what comes by the intake queue (1 MiB) is not EventBridge's: a
    # disruption's id is its record's token, and an id larger than the item can hold (400 KB) would fail the
    # write at every retry until the dead-letter queue.
    id: str = Field(max_length=128)
    source: str
    account: str
    time: AwsTime  # EventBridge writes UTC with its Z; a time without a zone is not EventBridge's
    region: str
    # (AWS Health's own sample of a retirement has none: its schema says the field is not required)
    resources: list[str] = Field(default_factory=list)
    detail_type: str = Field(alias="detail-type")
    detail: Any
    # An archive's replay's name, as EventBridge lets one be (1 to 64 of these characters: the Replay API's). Not
    # bounded, a forged one by the queue went whole into the warning that refuses its disruption: a line past what
    # CloudWatch Logs keeps of an event (256 KB), cut with its JSON.
    replay_name: str | None = Field(None, alias="replay-name", pattern=r"^[.\-_A-Za-z0-9]{1,64}$")
