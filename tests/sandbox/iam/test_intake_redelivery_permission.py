"""The intake function shortens the visibility timeout of an intake queue record it retries on purpose
(``entrypoints.partial_batch``): its role may ChangeMessageVisibility on its own queue, as the template grants it,
and no other function's may (the sandbox's IAM refuses what the role does not allow, as AWS does)."""

from __future__ import annotations

from nodecycle_sandbox.runner import Runner
from tests.sandbox.iam.test_enforcement import client, deployed, error, session

__all__ = ["deployed"]  # (the module's deployment of the template, imported to be used here)


def test_the_intake_function_may_change_the_visibility_of_its_own_queues_messages(
    deployed: tuple[str, Runner],
) -> None:
    # Given a message of the intake queue in flight, received by the intake function's role (its mapping's)
    _, runner = deployed
    queue = runner.queue("IntakeQueue")
    client(deployed, "sqs").send_message(QueueUrl=queue.url, MessageBody="{}")
    intake = client(deployed, "sqs", "IntakeFunction")
    (message,) = intake.receive_message(QueueUrl=queue.url)["Messages"]

    # When another function's role changes its visibility, Then IAM refuses it
    denied = error(
        client(deployed, "sqs", "DrainFunction").change_message_visibility,
        QueueUrl=queue.url,
        ReceiptHandle=message["ReceiptHandle"],
        VisibilityTimeout=10,
    )
    assert denied["Code"] == "AccessDenied"
    assert session("DrainFunction") in denied["Message"]

    # And the intake function's role changes it (before: AccessDenied, no identity-based policy allows it)
    intake.change_message_visibility(
        QueueUrl=queue.url, ReceiptHandle=message["ReceiptHandle"], VisibilityTimeout=0
    )
    intake.delete_message(QueueUrl=queue.url, ReceiptHandle=message["ReceiptHandle"])
