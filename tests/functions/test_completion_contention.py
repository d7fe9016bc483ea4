"""A CompleteLifecycleAction that Auto Scaling refuses for contention, on the sandbox's AWS server (moto with the
lifecycle emulation behind its fault layer) through nodecycle's adapter and client configuration.

Auto Scaling answers ``ResourceContention`` (HTTP 500, a Sender fault: "You already have a pending update to an
Auto Scaling resource") to a write that meets another update of the same resource still pending; the API reference
lists it for CompleteLifecycleAction and RecordLifecycleActionHeartbeat. The refused call did nothing: the other
update goes on. botocore retries it as any 5xx, and when that other update was a completion of the same action (an
operator's ABANDON, say), the retry is told "No active Lifecycle Action found". That action was settled elsewhere,
not by this call: counted as this caller's completion (as after a 5xx whose answer was lost, which may have
landed), the lifecycle recorded the action completed with its own result and counted no settlement elsewhere, where
Auto Scaling had abandoned the launch."""

from __future__ import annotations

import urllib.request
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.retries.standard import ExponentialBackoff

from nodecycle.adapters.aws.autoscaling import AutoscalingActions
from nodecycle.adapters.aws.clients import CLIENT_CONFIG
from nodecycle.domain.model import ActionRef, Transition
from nodecycle.domain.policy import ActionResult
from nodecycle_sandbox.aws import LAUNCHING, AwsControl
from nodecycle_sandbox.aws.faults import FAULTS
from nodecycle_sandbox.aws.group import AutoScalingGroup, GroupSpec, HookSpec
from nodecycle_sandbox.aws.server import MotoServer
from nodecycle_sandbox.faults import Fault
from tests.sandbox.aws.conftest import OPERATOR_KEY, RecordingBus

REGION = "eu-west-1"
FUNCTION_KEY = "AKIAEIPFUNCTION00001"  # the function's access key: the one the faults are armed for
HOOK = HookSpec("ready", LAUNCHING, heartbeat_timeout=300, default_result="ABANDON")


@pytest.fixture
def endpoint(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    # (botocore's standard mode still retries the refused attempt, without its jittered sleep of up to a second)
    monkeypatch.setattr(ExponentialBackoff, "delay_amount", lambda self, context: 0.0)
    server = MotoServer()
    url = server.start()
    yield url
    FAULTS.disarm()
    # Server mode shares moto's global backends with the other tests: leave them empty.
    urllib.request.urlopen(urllib.request.Request(f"{url}/moto-api/reset", method="POST")).close()
    server.stop()


def _client(url: str, service: str, key: str, **config: Any) -> Any:
    return boto3.client(  # type: ignore[call-overload]
        service,
        endpoint_url=url,
        region_name=REGION,
        aws_access_key_id=key,
        aws_secret_access_key="secret",
        **config,
    )


@pytest.fixture
def launching(endpoint: str) -> Iterator[tuple[ActionRef, AwsControl]]:
    """The launch action of a group's one instance, held by its launch hook (default result ABANDON)."""
    control = AwsControl(region=REGION)
    control.connect(events=RecordingBus(), nodes=None)
    group = AutoScalingGroup(
        autoscaling=_client(endpoint, "autoscaling", OPERATOR_KEY),
        ec2=_client(endpoint, "ec2", OPERATOR_KEY),
        control=control,
        region=REGION,
        name="workers",
    )
    group.create(GroupSpec(name="workers", size=1, hooks=(HOOK,)))
    (action,) = [a for a in group.actions() if a.active]
    yield (
        ActionRef(
            group="workers",
            hook=HOOK.name,
            instance_id=action.instance_id,
            token=action.token,
            transition=Transition.LAUNCHING,
        ),
        control,
    )
    control.close()


def complete_contended_once(endpoint: str, action: ActionRef) -> bool:
    """nodecycle's completion of ``action`` with CONTINUE, with its client's settings, the first attempt Auto Scaling
    refuses for contention (ResourceContention: another update of the group pending, nothing done)."""
    FAULTS.arm_for(
        [Fault("pending", "aws-contention", target="autoscaling.CompleteLifecycleAction", limit=1)],
        seed=1,
        callers=[FUNCTION_KEY],
    )
    autoscaling = AutoscalingActions(_client(endpoint, "autoscaling", FUNCTION_KEY, config=CLIENT_CONFIG))
    return autoscaling.complete(action, ActionResult.CONTINUE)


def test_a_completion_refused_for_contention_with_another_settlement_is_no_completion_of_its_own(
    endpoint: str, launching: tuple[ActionRef, AwsControl]
) -> None:
    # Given a launch action an operator abandons (the update pending when nodecycle's completion comes: Auto
    # Scaling refuses that completion's first attempt for contention, without doing it)
    action, control = launching
    _client(endpoint, "autoscaling", OPERATOR_KEY).complete_lifecycle_action(
        AutoScalingGroupName=action.group,
        LifecycleHookName=action.hook,
        InstanceId=action.instance_id,
        LifecycleActionResult="ABANDON",
    )

    # When nodecycle completes it with CONTINUE, its first attempt refused for contention (botocore retries the
    # refused attempt, and its retry finds no active action)
    completed = complete_contended_once(endpoint, action)

    # Then the refusal was Auto Scaling's contention, the action was the operator's ABANDON, and nodecycle does not
    # take that settlement for its own completion
    assert FAULTS.counts() == {"aws-contention": 1}
    (settled,) = [a for a in control.actions() if a.token == action.token]
    assert (settled.outcome, settled.result) == ("completed", "ABANDON")
    assert completed is False


def test_a_completion_refused_for_contention_alone_completes_at_its_retry(
    endpoint: str, launching: tuple[ActionRef, AwsControl]
) -> None:
    # Given a launch action whose completion's first attempt Auto Scaling refuses for contention (another update
    # of the group pending, which leaves the action open)
    action, control = launching

    # When nodecycle completes it with CONTINUE
    completed = complete_contended_once(endpoint, action)

    # Then botocore's retry completed it: nodecycle's completion, with its result
    assert FAULTS.counts() == {"aws-contention": 1}
    (settled,) = [a for a in control.actions() if a.token == action.token]
    assert (settled.outcome, settled.result) == ("completed", "CONTINUE")
    assert completed is True
