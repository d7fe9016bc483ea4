"""The emulated AWS endpoint throttling and failing as each service does, for the callers a test names."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, cast

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError

from nodecycle_sandbox.aws.faults import FAULTS
from nodecycle_sandbox.aws.server import MotoServer
from nodecycle_sandbox.faults import RUNNER_AGENT, Fault

REGION = "eu-west-1"
FUNCTION_KEY = "AKIADRAINFUNCTIO0001"
OTHER_KEY = "AKIASANDBOXRUNNER000"


@pytest.fixture(scope="module")
def endpoint() -> Iterator[str]:
    server = MotoServer()
    yield server.start()
    server.stop()


@pytest.fixture(autouse=True)
def disarmed() -> Iterator[None]:
    yield
    FAULTS.disarm()


NO_RETRY = Config(retries={"total_max_attempts": 1, "mode": "standard"})  # see each answer


def _client(endpoint: str, service: str, key: str = FUNCTION_KEY, config: Config = NO_RETRY) -> Any:
    return boto3.client(
        service,  # type: ignore[call-overload]
        endpoint_url=endpoint,
        region_name=REGION,
        aws_access_key_id=key,
        aws_secret_access_key="secret",
        config=config,
    )


@pytest.mark.parametrize(
    ("service", "call", "code", "status"),
    [
        ("autoscaling", lambda c: c.describe_auto_scaling_groups(), "Throttling", 400),
        ("ec2", lambda c: c.describe_addresses(), "RequestLimitExceeded", 503),
        ("dynamodb", lambda c: c.list_tables(), "ProvisionedThroughputExceededException", 400),
        ("sqs", lambda c: c.list_queues(), "RequestThrottled", 400),
        ("eks", lambda c: c.describe_cluster(name="x"), "ThrottlingException", 429),
    ],
)
def test_throttling_uses_each_services_own_error_code(
    endpoint: str, service: str, call: Any, code: str, status: int
) -> None:
    # Given throttling of every call of the service
    FAULTS.arm_for([Fault("t", "aws-throttle", target=f"{service}.*")], seed=1, callers=[FUNCTION_KEY])

    # When the function calls it, Then boto3 reads the service's own throttling error
    with pytest.raises(ClientError) as refused:
        call(_client(endpoint, service))
    assert refused.value.response["Error"]["Code"] == code
    assert refused.value.response["ResponseMetadata"]["HTTPStatusCode"] == status


def test_server_errors_hit_the_chosen_operation_of_the_chosen_callers_only(endpoint: str) -> None:
    # Given 5xx on autoscaling's DescribeAutoScalingGroups, for the function's key
    FAULTS.arm_for(
        [Fault("e", "aws-error", target="autoscaling.DescribeAutoScalingGroups")],
        seed=1,
        callers=[FUNCTION_KEY],
    )
    function = _client(endpoint, "autoscaling")

    # When the function makes that call, another call, and another caller makes that call
    with pytest.raises(ClientError) as failed:
        function.describe_auto_scaling_groups()
    function.describe_launch_configurations()
    _client(endpoint, "autoscaling", OTHER_KEY).describe_auto_scaling_groups()

    # Then only the first failed, with the 500 AWS sends, and it is the only fault on the books
    assert failed.value.response["Error"]["Code"] == "InternalFailure"
    assert failed.value.response["ResponseMetadata"]["HTTPStatusCode"] == 500
    assert [(f.kind, f.detail) for f in FAULTS.firings()] == [
        ("aws-error", "autoscaling.DescribeAutoScalingGroups")
    ]


def test_a_refused_lifecycle_call_names_its_instance(endpoint: str) -> None:
    # Given throttling of CompleteLifecycleAction
    FAULTS.arm_for(
        [Fault("t", "aws-throttle", target="autoscaling.CompleteLifecycleAction")], seed=1, callers=None
    )

    # When a function completes the action of one instance
    with pytest.raises(ClientError):
        _client(endpoint, "autoscaling").complete_lifecycle_action(
            AutoScalingGroupName="g",
            LifecycleHookName="h",
            InstanceId="i-0123456789abcdef0",
            LifecycleActionResult="CONTINUE",
        )

    # Then the books say which action was refused (the judges tell a drain from its completion's retries)
    assert [f.detail for f in FAULTS.firings()] == ["autoscaling.CompleteLifecycleAction i-0123456789abcdef0"]


def test_a_denied_write_of_a_lifecycle_record_names_its_instance(endpoint: str) -> None:
    # Given DynamoDB's writes denied to the function
    FAULTS.arm_for([Fault("d", "aws-denied", target="dynamodb.PutItem")], seed=1, callers=[FUNCTION_KEY])

    # When it writes the lifecycle record of one instance (its id names the instance first)
    with pytest.raises(ClientError):
        _client(endpoint, "dynamodb").put_item(
            TableName="records", Item={"id": {"S": "i-0123456789abcdef0/terminate/tok"}, "seq": {"N": "9"}}
        )

    # Then the books say whose record was refused (the judges tell a completer's claim left standing from another's)
    assert [f.detail for f in FAULTS.firings()] == ["dynamodb.PutItem i-0123456789abcdef0"]


def test_botocore_retries_a_throttled_call_that_then_succeeds(endpoint: str) -> None:
    # Given one throttled SendMessage
    sqs = _client(endpoint, "sqs")
    url = sqs.create_queue(QueueName="throttled")["QueueUrl"]
    FAULTS.arm_for([Fault("t", "aws-throttle", target="sqs.SendMessage", limit=1)], seed=1, callers=None)

    # When a client with botocore's standard retries sends a message
    retrying = _client(endpoint, "sqs", config=Config(retries={"max_attempts": 3, "mode": "standard"}))
    retrying.send_message(QueueUrl=url, MessageBody="hello")

    # Then it went through on the retry: one message, one fault
    assert (
        sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["ApproximateNumberOfMessages"])["Attributes"][
            "ApproximateNumberOfMessages"
        ]
        == "1"
    )
    assert FAULTS.counts() == {"aws-throttle": 1}


def test_the_runners_event_source_mappings_are_never_refused_though_they_poll_with_the_functions_key(
    endpoint: str,
) -> None:
    # Given throttling of every SQS call the function's key makes
    FAULTS.arm_for([Fault("t", "aws-throttle", target="sqs.*")], seed=1, callers=[FUNCTION_KEY])
    mapping = _client(endpoint, "sqs", config=NO_RETRY.merge(Config(user_agent_extra=RUNNER_AGENT)))

    # When the runner's mapping polls with that key, and the function itself calls
    mapping.list_queues()
    with pytest.raises(ClientError):
        _client(endpoint, "sqs").list_queues()

    # Then only the function was refused: faults are for nodecycle's calls, not Lambda's pollers
    assert [f.detail for f in FAULTS.firings()] == ["sqs.ListQueues"]


@pytest.mark.parametrize(
    ("service", "call", "code", "status"),
    [
        ("autoscaling", lambda c: c.describe_auto_scaling_groups(), "AccessDenied", 403),
        ("ec2", lambda c: c.describe_addresses(), "UnauthorizedOperation", 403),
        ("dynamodb", lambda c: c.list_tables(), "AccessDeniedException", 400),
        ("sqs", lambda c: c.list_queues(), "AccessDenied", 403),
        ("eks", lambda c: c.describe_cluster(name="x"), "AccessDeniedException", 403),
    ],
)
def test_a_denied_call_is_refused_with_each_services_own_access_error(
    endpoint: str, service: str, call: Any, code: str, status: int
) -> None:
    # Given every call of the service denied (an SCP changed for a while)
    FAULTS.arm_for([Fault("d", "aws-denied", target=f"{service}.*")], seed=1, callers=[FUNCTION_KEY])

    # When the function calls it, Then boto3 reads the service's own access error, which says why
    with pytest.raises(ClientError) as refused:
        call(_client(endpoint, service))
    assert refused.value.response["Error"]["Code"] == code
    assert refused.value.response["ResponseMetadata"]["HTTPStatusCode"] == status
    assert "with an explicit deny in a service control policy" in refused.value.response["Error"]["Message"]
    assert FAULTS.counts() == {"aws-denied": 1}


def test_an_auto_scaling_write_refused_for_contention_is_a_sender_5xx_and_nothing_is_done(
    endpoint: str,
) -> None:
    # Given Auto Scaling's writes contended (another update of the resource pending), for the function's key
    FAULTS.arm_for([Fault("c", "aws-contention", target="autoscaling.*")], seed=1, callers=[FUNCTION_KEY])
    function = _client(endpoint, "autoscaling")

    # When the function makes a write
    with pytest.raises(ClientError) as refused:
        function.create_launch_configuration(
            LaunchConfigurationName="contended", ImageId="ami-12c6146b", InstanceType="m5.large"
        )

    # Then it reads Auto Scaling's ResourceContention, the 500 its model declares a Sender fault, and nothing was
    # done; its reads are not contended
    assert refused.value.response["Error"]["Code"] == "ResourceContention"
    assert cast(dict[str, Any], refused.value.response["Error"])["Type"] == "Sender"
    assert refused.value.response["ResponseMetadata"]["HTTPStatusCode"] == 500
    assert function.describe_launch_configurations()["LaunchConfigurations"] == []
    assert [f.detail for f in FAULTS.firings()] == ["autoscaling.CreateLaunchConfiguration"]


def test_contention_is_auto_scalings_alone(endpoint: str) -> None:
    # Given a contention rule for every service's calls
    FAULTS.arm_for([Fault("c", "aws-contention", target="*")], seed=1, callers=[FUNCTION_KEY])

    # When the function writes to another service, Then nothing refuses it
    _client(endpoint, "sqs").create_queue(QueueName="uncontended")
    assert FAULTS.firings() == []


def test_a_lost_answer_is_a_5xx_for_a_call_that_landed_and_botocores_retry_meets_what_it_did(
    endpoint: str,
) -> None:
    # Given the answer of the function's first ReleaseAddress lost on the way back (EC2 released the address)
    ec2 = _client(endpoint, "ec2", config=Config(retries={"total_max_attempts": 2, "mode": "standard"}))
    allocation = ec2.allocate_address(Domain="vpc")["AllocationId"]
    FAULTS.arm_for(
        [Fault("l", "aws-lost-answer", target="ec2.ReleaseAddress", limit=1)], seed=1, callers=[FUNCTION_KEY]
    )

    # When the function releases it, botocore sending the call again after the 5xx
    with pytest.raises(ClientError) as retried:
        ec2.release_address(AllocationId=allocation)

    # Then the retry is told the address is gone (the first attempt released it), as EC2 tells it
    assert retried.value.response["Error"]["Code"] == "InvalidAllocationID.NotFound"
    assert retried.value.response["ResponseMetadata"]["RetryAttempts"] == 1
    assert FAULTS.counts() == {"aws-lost-answer": 1}
    FAULTS.disarm()
    assert allocation not in [a["AllocationId"] for a in ec2.describe_addresses()["Addresses"]]


def test_a_lost_answer_without_a_retry_is_the_services_5xx_though_the_call_landed(endpoint: str) -> None:
    # Given the answer of a queue's SendMessage lost, and no retry
    sqs = _client(endpoint, "sqs", key=OTHER_KEY)
    url = sqs.create_queue(QueueName="lost-answers")["QueueUrl"]
    FAULTS.arm_for([Fault("l", "aws-lost-answer", target="sqs.SendMessage")], seed=1, callers=[FUNCTION_KEY])

    # When the function sends a message, Then it reads the service's 5xx
    with pytest.raises(ClientError) as failed:
        _client(endpoint, "sqs").send_message(QueueUrl=url, MessageBody="sent")
    assert failed.value.response["ResponseMetadata"]["HTTPStatusCode"] == 500

    # and the message was queued all the same
    FAULTS.disarm()
    got = sqs.receive_message(QueueUrl=url, WaitTimeSeconds=0)
    assert [m["Body"] for m in got.get("Messages", [])] == ["sent"]


def test_a_throttled_transaction_is_cancelled_for_throughput_and_the_store_retries_its_step_later(
    endpoint: str,
) -> None:
    from datetime import timedelta

    from nodecycle.adapters.aws.clients import CLIENT_CONFIG
    from nodecycle.adapters.aws.records import DynamoRecordStore
    from nodecycle.domain.errors import TransientError
    from tests.unit.foundation.test_engine import PLAN, make_record

    # Given the lifecycle table, and DynamoDB throttling the function's transactions
    operator = _client(endpoint, "dynamodb", key=OTHER_KEY)
    table = "throttled-records"
    operator.create_table(
        TableName=table,
        KeySchema=[{"AttributeName": "id", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "id", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
    )
    FAULTS.arm_for(
        [Fault("t", "aws-throttle", target="dynamodb.TransactWriteItems")], seed=1, callers=[FUNCTION_KEY]
    )

    # When a record is written with its action's claim (one transaction), Then DynamoDB cancels it, naming
    # throughput as the reason of its first item
    with pytest.raises(ClientError) as cancelled:
        _client(endpoint, "dynamodb").transact_write_items(
            TransactItems=[
                {"Put": {"TableName": table, "Item": {"id": {"S": "a"}}}},
                {"Put": {"TableName": table, "Item": {"id": {"S": "b"}}}},
            ]
        )
    assert cancelled.value.response["Error"]["Code"] == "TransactionCanceledException"
    reasons = cancelled.value.response["CancellationReasons"]
    assert [r["Code"] for r in reasons] == ["ThrottlingError", "None"]

    # And the store, with a client of the functions' retry settings, reads it as a step to retry later: not its
    # claim taken nor its record's (botocore does not retry a cancelled transaction; the functions' own client
    # retries one cancelled for throughput, as tests/functions/test_record_store_throttled_transaction.py shows),
    # and nothing was written
    store = DynamoRecordStore(
        table, ttl=timedelta(days=1), dynamodb=_client(endpoint, "dynamodb", config=CLIENT_CONFIG)
    )
    with pytest.raises(TransientError):
        store.write_claimed(make_record(PLAN), None)
    assert operator.scan(TableName=table, ConsistentRead=True)["Items"] == []


def test_a_throttled_batch_read_answers_its_first_key_and_names_the_others_unprocessed(endpoint: str) -> None:
    from datetime import timedelta

    from nodecycle.adapters.aws.clients import CLIENT_CONFIG
    from nodecycle.adapters.aws.records import DynamoRecordStore
    from tests.unit.foundation.test_engine import PLAN, make_record

    # Given three lifecycle records, and DynamoDB throttling the function's batch reads
    operator = _client(endpoint, "dynamodb", key=OTHER_KEY)
    table = "batch-read-records"
    operator.create_table(
        TableName=table,
        KeySchema=[{"AttributeName": "id", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "id", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
    )
    writer = DynamoRecordStore(table, ttl=timedelta(days=1), dynamodb=operator)
    ids = [f"i-0123456789abcdef0/{cause}" for cause in ("spot-interruption", "scheduled-change", "rebalance")]
    for record_id in ids:
        assert writer.create(make_record(PLAN, id=record_id))
    FAULTS.arm_for(
        [Fault("t", "aws-throttle", target="dynamodb.BatchGetItem")], seed=1, callers=[FUNCTION_KEY]
    )
    asked = [{"id": {"S": i}} for i in ids]
    keys: dict[str, Any] = {table: {"Keys": asked, "ConsistentRead": True}}

    # When the three are read in one request, Then it is answered, in part: the first read, the others named
    # unprocessed with the request's options (botocore verifies the answer's checksum: it is the one sent)
    answer = _client(endpoint, "dynamodb").batch_get_item(RequestItems=keys)
    assert [item["id"]["S"] for item in answer["Responses"][table]] == ids[:1]
    assert answer["UnprocessedKeys"] == {table: {"Keys": asked[1:], "ConsistentRead": True}}
    # ...and one key alone, which DynamoDB could not read at all, is refused as any throttled call
    with pytest.raises(ClientError) as refused:
        _client(endpoint, "dynamodb").batch_get_item(RequestItems={table: {"Keys": asked[:1]}})
    assert refused.value.response["Error"]["Code"] == "ProvisionedThroughputExceededException"

    # And the store, with the functions' client, throttled for its next two requests, asks again for what each
    # left: the three read, each request answering one
    FAULTS.arm_for(
        [Fault("t", "aws-throttle", target="dynamodb.BatchGetItem", limit=2)], seed=1, callers=[FUNCTION_KEY]
    )
    store = DynamoRecordStore(
        table, ttl=timedelta(days=1), dynamodb=_client(endpoint, "dynamodb", config=CLIENT_CONFIG)
    )
    assert sorted(store.get_many(ids)) == sorted(ids)


@pytest.mark.parametrize("item", [0, 1])
def test_a_transaction_cancelled_for_a_conflict_is_retried_later_never_read_as_a_claim_or_record_taken(
    endpoint: str, item: int
) -> None:
    from datetime import UTC, datetime, timedelta

    from nodecycle.adapters.aws.clients import CLIENT_CONFIG
    from nodecycle.adapters.aws.records import DynamoRecordStore
    from nodecycle.domain.errors import TransientError
    from tests.unit.foundation.test_engine import PLAN, make_record

    # Given the lifecycle table, and another writer's transaction holding the record (item 0) or its action's
    # claim (item 1) of each of the function's transactions, and each of its other writes' items
    operator = _client(endpoint, "dynamodb", key=OTHER_KEY)
    table = f"conflicting-records-{item}"
    operator.create_table(
        TableName=table,
        KeySchema=[{"AttributeName": "id", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "id", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
    )
    FAULTS.arm_for(
        [Fault("c", "dynamodb-conflict", target="dynamodb.*", value=item)], seed=1, callers=[FUNCTION_KEY]
    )

    # When a record is written with its action's claim (one transaction), Then DynamoDB cancels it, naming the
    # conflict as the reason of that item
    with pytest.raises(ClientError) as cancelled:
        _client(endpoint, "dynamodb").transact_write_items(
            TransactItems=[
                {"Put": {"TableName": table, "Item": {"id": {"S": "a"}}}},
                {"Put": {"TableName": table, "Item": {"id": {"S": "b"}}}},
            ]
        )
    assert cancelled.value.response["Error"]["Code"] == "TransactionCanceledException"
    codes = [r["Code"] for r in cancelled.value.response["CancellationReasons"]]
    assert codes == ["TransactionConflict", "None"][:: 1 if item == 0 else -1]

    # And the store, with the functions' retrying client, reads it and a conflicting write alone as a step to
    # retry later (botocore retries neither): not as its claim or record taken, nor as progress saved further
    store = DynamoRecordStore(
        table, ttl=timedelta(days=1), dynamodb=_client(endpoint, "dynamodb", config=CLIENT_CONFIG)
    )
    record = make_record(PLAN)
    with pytest.raises(TransientError):
        store.write_claimed(record, None)
    with pytest.raises(TransientError):
        store.create(record)
    with pytest.raises(TransientError):
        store.save_progress("event", 1, datetime.now(UTC))
    # (reads are not refused for a transaction under way)
    assert store.get(record.id) is None
    assert operator.scan(TableName=table, ConsistentRead=True)["Items"] == []
    assert FAULTS.counts() == {"dynamodb-conflict": 4}
