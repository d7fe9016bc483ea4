"""Auto Scaling lifecycle emulation on moto: hooks, waits, timeouts, events, instance refresh, nodes."""

from nodecycle_sandbox.aws.control import SANDBOX_ACCOUNT, AwsControl, AwsControls
from nodecycle_sandbox.aws.install import install
from nodecycle_sandbox.aws.lifecycle import EventSink, LifecycleEmulator, emulator_for
from nodecycle_sandbox.aws.nodes import NodePlan, NodeRegistry
from nodecycle_sandbox.aws.records import (
    LAUNCHING,
    TERMINATING,
    ActionRecord,
    InstanceHistory,
    Notification,
    RefreshBatch,
    RefreshTimeline,
)

__all__ = [
    "LAUNCHING",
    "SANDBOX_ACCOUNT",
    "TERMINATING",
    "ActionRecord",
    "AwsControl",
    "AwsControls",
    "EventSink",
    "InstanceHistory",
    "LifecycleEmulator",
    "NodePlan",
    "NodeRegistry",
    "Notification",
    "RefreshBatch",
    "RefreshTimeline",
    "emulator_for",
    "install",
]
