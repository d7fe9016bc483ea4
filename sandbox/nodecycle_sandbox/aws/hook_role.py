"""Auto Scaling notifying SQS or SNS for a lifecycle hook assumes the hook's role: the emulation asks the sandbox's
IAM whether that role's trust policy lets Auto Scaling in for this group, and whether its policies allow
reaching the queue (GetQueueUrl, then SendMessage) or publishing to the topic (sns:Publish, what AWS's
AutoScalingNotificationAccessRole grants for one). A topic of the group's account needs nothing of its own
policy: its default policy lets the account's principals publish."""

from __future__ import annotations

from nodecycle_sandbox.iam.enforce import authorize_service_role
from nodecycle_sandbox.iam.evaluate import Request, context_of

AUTOSCALING = "autoscaling.amazonaws.com"


def authorize(role_arn: str, account: str, group_arn: str, target_arn: str) -> None:
    """Raise ``AccessDenied`` when the role cannot deliver to the queue or topic for this group."""
    service, region = target_arn.split(":")[2:4]
    context = context_of({"aws:RequestedRegion": region})
    if service == "sns":
        requests = [Request("sns:Publish", target_arn, context)]
    else:
        requests = [
            Request("sqs:GetQueueUrl", target_arn, context),
            Request("sqs:SendMessage", target_arn, context),
        ]
    authorize_service_role(
        role_arn,
        service=AUTOSCALING,
        source_account=account,
        source_arn=group_arn,
        requests=requests,
    )
