"""An operator command whose AWS calls go somewhere that is not AWS says so, naming the endpoint.

The README has the operator source the sandbox's environment file (``. .nodecycle/sandbox.env``) to try the
commands; it sets ``AWS_ENDPOINT_URL`` and the sandbox's keys, which botocore prefers to the operator's own
profile. The same shell later asked about a real stack was told "no CloudFormation stack 'prod' in eu-west-1
(pass --region...)" by the sandbox's CloudFormation, and, with the sandbox stopped, "cannot reach AWS", both
sending the operator after the region or the network. An endpoint that answers with something other than an
AWS answer (an HTML error page: a proxy, a web server, an endpoint typed wrong) was a botocore traceback. The
endpoints here are real HTTP servers: moto in server mode (the sandbox's AWS, as CloudFormation answers an
unknown stack: a ValidationError), a server answering every request with an HTML 500 page, and a closed port."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler

import pytest
from moto import mock_aws

from nodecycle_cli.main import main
from nodecycle_sandbox.aws.server import MotoServer
from tests.support.http_stub import serving

STATUS = ["status", "--stack", "prod"]


@pytest.fixture
def operator(monkeypatch: pytest.MonkeyPatch) -> None:
    """An operator's shell with keys and a region; botocore's retries cut to one try (AWS_MAX_ATTEMPTS)."""
    for name, value in {
        "AWS_ACCESS_KEY_ID": "AKIAOPERATORENDPOINT",
        "AWS_SECRET_ACCESS_KEY": "secret",
        "AWS_REGION": "eu-west-1",
        "AWS_MAX_ATTEMPTS": "1",
    }.items():
        monkeypatch.setenv(name, value)
    for name in ("AWS_ENDPOINT_URL", "AWS_PROFILE", "NODECYCLE_STACK"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture(scope="module")
def moto_endpoint() -> Iterator[str]:
    server = MotoServer()
    yield server.start()
    server.stop()


class _HtmlErrorPage(BaseHTTPRequestHandler):
    """What a web server or a proxy answers an AWS call with: an HTML page, status 500."""

    def do_POST(self) -> None:  # (every AWS query-protocol call is a POST)
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        body = b"<!doctype html>\n<title>500 Internal Server Error</title>\n<h1>Internal Server Error</h1>\n"
        self.send_response(500)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def html_endpoint() -> Iterator[str]:
    with serving(_HtmlErrorPage) as url:
        yield url


def closed_port() -> str:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{probe.getsockname()[1]}"  # closed once the probe is


def test_a_stack_not_found_at_the_sandboxs_endpoint_names_the_endpoint(
    operator: None, moto_endpoint: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given a shell that sourced the sandbox's environment file, and a stack the sandbox does not have
    monkeypatch.setenv("AWS_ENDPOINT_URL", moto_endpoint)
    # When the operator asks about their real stack
    code = main(STATUS)
    # Then one line says the stack was looked for at that endpoint, set by AWS_ENDPOINT_URL, and how to reach AWS
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1
    assert "no CloudFormation stack 'prod'" in err
    assert moto_endpoint in err
    assert "unset AWS_ENDPOINT_URL" in err


def test_an_endpoint_answering_html_is_one_line_naming_it_not_a_traceback(
    operator: None, html_endpoint: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given AWS_ENDPOINT_URL naming a server that answers every call with an HTML error page
    monkeypatch.setenv("AWS_ENDPOINT_URL", html_endpoint)
    # When the operator runs a command
    code = main(STATUS)
    # Then it exits as a command that could not run, with one line naming the call, the endpoint and the variable
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1
    assert "DescribeStacks" in err
    assert html_endpoint in err
    assert "unset AWS_ENDPOINT_URL" in err


def test_an_endpoint_nobody_listens_on_names_the_variable_that_set_it(
    operator: None, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given the sandbox stopped since its environment file was sourced
    endpoint = closed_port()
    monkeypatch.setenv("AWS_ENDPOINT_URL", endpoint)
    # When the operator runs a command, Then it cannot reach it, and says which variable sent it there
    code = main(STATUS)
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1
    assert "cannot reach AWS" in err
    assert endpoint in err
    assert "unset AWS_ENDPOINT_URL" in err


def test_against_aws_a_stack_not_found_says_nothing_of_an_endpoint(
    operator: None, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given AWS's own endpoint (moto in-process answers at amazonaws.com), no AWS_ENDPOINT_URL
    with mock_aws():
        code = main(STATUS)
    # Then the line is about the stack and the region only
    err = capsys.readouterr().err
    assert code == 2
    assert "no CloudFormation stack 'prod' in eu-west-1" in err
    assert "AWS_ENDPOINT_URL" not in err
