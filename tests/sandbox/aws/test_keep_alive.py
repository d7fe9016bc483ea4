"""The sandbox's AWS server keeps HTTP/1.1 connections, and frames every answer (``aws/keep_alive.py``).

werkzeug answered every request with ``Connection: close``: each AWS call of the sandbox cost a new connection and a
server thread (about half the CPU of a small call, client and server together). A kept connection must frame each
answer, or a client reading an answer to the connection's end waits forever: every answer here has its
Content-Length (a HEAD's is its resource's, without a body), and the next request on the connection is answered in
turn. Each test is a few requests on one connection (well under a second)."""

from __future__ import annotations

import http.client
import json
from collections.abc import Iterator

import pytest

from nodecycle_sandbox.aws.server import MotoServer


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    moto = MotoServer()
    url = moto.start()
    yield url.removeprefix("http://")
    moto.stop()


def sqs_call(
    connection: http.client.HTTPConnection, action: str, body: dict[str, object]
) -> tuple[int, bytes]:
    """One SQS JSON call on ``connection`` (its signature's scope names the service; moto checks no signature):
    status and body."""
    connection.request(
        "POST",
        "/",
        body=json.dumps(body),
        headers={
            "Content-Type": "application/x-amz-json-1.0",
            "X-Amz-Target": f"AmazonSQS.{action}",
            "Authorization": "AWS4-HMAC-SHA256 Credential=AKIAKEEPALIVE0000000/20260101/eu-west-1/sqs/aws4_request, "
            "SignedHeaders=host, Signature=0",
        },
    )
    answer = connection.getresponse()
    assert answer.getheader("Content-Length") is not None  # framed: never read to the connection's end
    assert answer.getheader("Transfer-Encoding") is None
    return answer.status, answer.read()


def test_one_connection_carries_several_calls_each_answer_with_its_length(server: str) -> None:
    connection = http.client.HTTPConnection(server, timeout=10)
    # Given a queue made on a connection
    status, body = sqs_call(connection, "CreateQueue", {"QueueName": "kept"})
    assert status == 200
    url = json.loads(body)["QueueUrl"]
    sock = connection.sock

    # When more calls follow on it, one of them refused (a 400 answer)
    sent = sqs_call(connection, "SendMessage", {"QueueUrl": url, "MessageBody": "one"})
    refused = sqs_call(connection, "GetQueueUrl", {"QueueName": "missing"})
    received = sqs_call(connection, "ReceiveMessage", {"QueueUrl": url, "WaitTimeSeconds": 0})

    # Then each is answered in turn on the same connection (before: Connection: close, a new one per call)
    assert connection.sock is sock is not None
    assert sent[0] == 200
    assert refused[0] == 400
    assert [m["Body"] for m in json.loads(received[1])["Messages"]] == ["one"]
    connection.close()


def test_a_head_answer_has_no_body_and_the_next_request_is_answered(server: str) -> None:
    connection = http.client.HTTPConnection(server, timeout=10)
    # When a HEAD is asked, then a GET on the same connection
    connection.request("HEAD", "/moto-api/")
    head = connection.getresponse()
    assert head.read() == b""
    connection.request("GET", "/moto-api/")
    get = connection.getresponse()

    # Then the GET's answer is its own (the HEAD's length announced no body to skip)
    assert head.status == get.status == 200
    assert (
        len(get.read())
        == int(get.getheader("Content-Length") or -1)
        == int(head.getheader("Content-Length") or -2)
    )
    connection.close()


def test_a_client_that_asks_to_close_gets_its_connection_closed(server: str) -> None:
    connection = http.client.HTTPConnection(server, timeout=10)
    connection.request("GET", "/moto-api/", headers={"Connection": "close"})
    answer = connection.getresponse()
    answer.read()
    assert answer.getheader("Connection") == "close"
    assert answer.will_close
