"""The address the deliveries of one launch's message take (``DynamoAddressLines.taking``) on moto's DynamoDB, the
lifecycle table: the first written wins, another replaces it only in place of the one EC2 refused, and a write
sent again after its answer was lost finds itself."""

from __future__ import annotations

from typing import Any

import boto3

from nodecycle.adapters.aws.address_lines import DynamoAddressLines
from tests.support.stack import Stack

RUN = "i-0123/launch/token#3"


def test_the_first_address_written_for_a_run_is_the_one_every_delivery_takes(stack: Stack) -> None:
    lines = DynamoAddressLines(stack.table)
    assert lines.taking(RUN, "eipalloc-a", None) == "eipalloc-a"
    assert lines.taking(RUN, "eipalloc-b", None) == "eipalloc-a"
    # (another run of the same launch, a later seq, decides afresh)
    assert lines.taking("i-0123/launch/token#4", "eipalloc-b", None) == "eipalloc-b"


def test_an_address_is_replaced_only_in_place_of_the_one_ec2_refused(stack: Stack) -> None:
    lines = DynamoAddressLines(stack.table)
    lines.taking(RUN, "eipalloc-a", None)
    # a delivery refused another address than the one written does not replace it
    assert lines.taking(RUN, "eipalloc-c", "eipalloc-b") == "eipalloc-a"
    # one refused the address written replaces it, once: the next delivery refused it takes the replacement
    assert lines.taking(RUN, "eipalloc-b", "eipalloc-a") == "eipalloc-b"
    assert lines.taking(RUN, "eipalloc-c", "eipalloc-a") == "eipalloc-b"


def test_a_write_sent_again_after_its_answer_was_lost_finds_itself(stack: Stack) -> None:
    # Given a write that landed, its answer lost, and botocore sending it again (the condition then fails)
    dynamodb: Any = boto3.client("dynamodb")
    sent = 0
    original = dynamodb.put_item

    def put_twice(**kwargs: Any) -> Any:
        nonlocal sent
        sent += 1
        original(**kwargs)
        return original(**kwargs)

    dynamodb.put_item = put_twice
    lines = DynamoAddressLines(stack.table, dynamodb)

    # Then the address written is the one this delivery takes, the first time and in place of a refused one
    assert lines.taking(RUN, "eipalloc-a", None) == "eipalloc-a"
    assert lines.taking(RUN, "eipalloc-b", "eipalloc-a") == "eipalloc-b"
    assert sent == 2
