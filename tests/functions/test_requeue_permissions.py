"""The work functions shorten the visibility timeout of a record of their queue retried on purpose
(``entrypoints.partial_batch``): each role may ChangeMessageVisibility on the queues its functions poll, as the
template grants it, and on no other queue (the sandbox's IAM refuses what a role does not allow, as AWS does)."""

from __future__ import annotations

import pytest

from nodecycle_sandbox.runner import Runner
from tests.sandbox.iam.test_enforcement import client, deployed, error

__all__ = ["deployed"]  # (the module's deployment of the template, imported to be used here)

# Each work queue, the function whose mapping polls it, and a work function whose role may not change it
POLLED = [
    ("DrainQueue", "DrainFunction", "EipFunction"),
    ("WakeQueue", "WakeFunction", "EipFunction"),
    ("EipQueue", "EipFunction", "DrainFunction"),
]


@pytest.mark.parametrize(("queue", "function", "other"), POLLED)
def test_a_work_function_may_change_the_visibility_of_its_own_queues_messages_only(
    deployed: tuple[str, Runner], queue: str, function: str, other: str
) -> None:
    # Given a message of a work queue in flight, received by the role of the function that polls it (its mapping's)
    _, runner = deployed
    url = runner.queue(queue).url
    client(deployed, "sqs").send_message(QueueUrl=url, MessageBody="{}")
    own = client(deployed, "sqs", function)
    (message,) = own.receive_message(QueueUrl=url)["Messages"]

    # When another work function's role changes its visibility, Then IAM refuses it
    for stranger in (other, "IntakeFunction"):
        denied = error(
            client(deployed, "sqs", stranger).change_message_visibility,
            QueueUrl=url,
            ReceiptHandle=message["ReceiptHandle"],
            VisibilityTimeout=10,
        )
        assert denied["Code"] == "AccessDenied", stranger

    # And the polling function's role changes it (before: AccessDenied, no identity-based policy allowed it)
    own.change_message_visibility(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"], VisibilityTimeout=0)
    own.delete_message(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"])
