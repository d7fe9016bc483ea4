"""Auto Scaling notifying SQS for a lifecycle hook assumes the hook's role: the emulation asks the sandbox's
IAM whether that role's trust policy lets Auto Scaling in for this group, and whether its policies allow
reaching the queue (GetQueueUrl, then SendMessage)."""

from __future__ import annotations

from nodecycle_sandbox.iam.enforce import authorize_service_role
from nodecycle_sandbox.iam.evaluate import Request, context_of

AUTOSCALING = "autoscaling.amazonaws.com"


def authorize(role_arn: str, account: str, group_arn: str, queue_arn: str) -> None:
    """Raise ``AccessDenied`` when the role cannot deliver to the queue for this group."""
    region = queue_arn.split(":")[3]
    context = context_of({"aws:RequestedRegion": region})
    authorize_service_role(
        role_arn,
        service=AUTOSCALING,
        source_account=account,
        source_arn=group_arn,
        requests=[
            Request("sqs:GetQueueUrl", queue_arn, context),
            Request("sqs:SendMessage", queue_arn, context),
        ],
    )
