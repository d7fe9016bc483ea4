"""The sweep's keep-alive of an action no step confirmed looks where its instance is first (the confirmation), and
when that look cannot be made (throttled, denied) heartbeats the sweep's unconfirmed actions by their instances and
fails the sweep (its alarm). But the confirmation raises a TransientError for a look that answered too: an instance
its group lists on its way into the wait state its action holds it in (``Terminating`` for ``Terminating:Wait``: a
state read lagging Auto Scaling's notification). The sweep took that answer for a failed look: it failed (the
sweeper's alarm, for nothing), said it "could not confirm" the action, and made no look for any other unconfirmed
action of that sweep."""

from __future__ import annotations

from datetime import timedelta

import boto3
from botocore.stub import Stubber

from nodecycle.adapters.aws.autoscaling import AutoscalingActions
from nodecycle.domain.model import Step
from tests.unit.foundation.test_engine import PLAN, make_record
from tests.unit.sweeper.test_sweeper import Repair

LAGGING = "i-0000000000000000a"  # read "Terminating" a moment after its action started
WAITING = "i-0000000000000000b"  # read "Terminating:Wait"


def test_a_look_that_answered_on_its_way_is_no_failed_look() -> None:
    # Given two lifecycles intake wrote, no step of them run yet (their queue stalled), both due a heartbeat: the
    # first (sooner due) of an instance Auto Scaling still reads on its way into its wait state
    repair = Repair()
    repair.autoscaling.action_timeout = 600
    for n, (instance, due) in enumerate(((LAGGING, 100), (WAITING, 110))):
        token = f"0000000{n}-aaaa-bbbb-cccc-dddddddddddd"  # (a token as Auto Scaling writes one)
        repair.autoscaling.issue(token, instance, hook=("nodes", "terminate"))
        begun = make_record(PLAN, Step.ACQUIRE_SLOT, verified_at=None, heartbeat_timeout=600)
        assert repair.records.create(
            begun.model_copy(
                update={
                    "id": f"{instance}/terminate/{token}",
                    "instance_id": instance,
                    "token": token,
                    "heartbeat_deadline": begun.started_at + timedelta(seconds=due),
                }
            )
        )
    # ... confirmed through the adapter, Auto Scaling answering each look and heartbeat
    client = boto3.client(
        "autoscaling", region_name="eu-west-1", aws_access_key_id="testing", aws_secret_access_key="testing"
    )
    with Stubber(client) as api:
        for instance, state in ((LAGGING, "Terminating"), (WAITING, "Terminating:Wait")):
            api.add_response(
                "describe_auto_scaling_instances",
                {"AutoScalingInstances": [listed(instance, state)]},
                {"InstanceIds": [instance]},
            )
            api.add_response("record_lifecycle_action_heartbeat", {})
        repair.autoscaling.confirm = AutoscalingActions(autoscaling=client).confirm  # type: ignore[method-assign]

        # When the sweep runs
        counts = repair.run()

        # Then it succeeds, and each unconfirmed action was looked at before its heartbeat
        assert counts["RepairsFailed"] == 0
        api.assert_no_pending_responses()


def listed(instance: str, state: str) -> dict[str, object]:
    return {
        "InstanceId": instance,
        "AutoScalingGroupName": "nodes",
        "AvailabilityZone": "eu-west-1a",
        "LifecycleState": state,
        "HealthStatus": "HEALTHY",
        "ProtectedFromScaleIn": False,
    }
