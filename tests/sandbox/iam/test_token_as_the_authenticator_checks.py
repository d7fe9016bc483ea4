"""The sandbox's API server refuses what EKS's authenticator (aws-iam-authenticator, ``pkg/token``'s ``Verify``)
refuses before it asks STS, and no less: a token over 4 KiB; a presigned URL whose path is not ``/``; a query
parameter outside its list (Action, Version, X-Amz-Algorithm, -Credential, -Date, -Expires, -Security-Token,
-Signature, -SignedHeaders) or given twice; an ``X-Amz-Expires`` missing or over 900 s ("invalid X-Amz-Expires
parameter in pre-signed URL"; versions up to 0.3.0 refused over 60 s, the product sends 60); no ``X-Amz-Date``;
and one signed more than 15 minutes ago, whatever its X-Amz-Expires says, by default (an API server told nothing
else). Each refused token below is signed correctly for its cluster, so only the rule it breaks refuses it.

The product's token passes all of them, with the session token a Lambda function's credentials carry."""

from __future__ import annotations

import base64
import datetime as dt
from collections.abc import Callable

import boto3
import pytest
from kubernetes.client import ApiClient, Configuration, CoreV1Api
from kubernetes.client.exceptions import ApiException

from nodecycle.adapters.kube.eks_access import EksTokens
from nodecycle_sandbox.kube import KubeServer
from nodecycle_sandbox.kube.auth import (
    SANDBOX_SECRET_KEY,
    TOKEN_PREFIX,
    TokenRejected,
    check_eks_token,
    make_eks_token,
    presigned_signature,
)

CLUSTER = "sandbox"
# A Lambda function's session token is about this long (base64 of ~1 KB): its URL-encoding grows the token
SESSION_TOKEN = "IQoJb3JpZ2luX2VjE" + "A/b+c=" * 170


def resigned(edit: Callable[[str], str], *, now: dt.datetime | None = None) -> str:
    """A token for CLUSTER whose unsigned URL is edited by ``edit``, then signed as the sandbox's keys sign."""
    made = make_eks_token(CLUSTER, now=now)
    url = base64.urlsafe_b64decode(made.removeprefix(TOKEN_PREFIX) + "==").decode()
    unsigned = edit(url.rsplit("&X-Amz-Signature=", 1)[0])
    signed = f"{unsigned}&X-Amz-Signature={presigned_signature(unsigned, CLUSTER, SANDBOX_SECRET_KEY)}"
    return TOKEN_PREFIX + base64.urlsafe_b64encode(signed.encode()).decode().rstrip("=")


def test_the_unedited_token_passes() -> None:
    assert check_eks_token(resigned(lambda url: url), cluster_name=CLUSTER)


@pytest.mark.parametrize(
    "edit",
    [
        pytest.param(
            lambda url: url.replace("X-Amz-Expires=60", "X-Amz-Expires=3600"), id="expires-over-900"
        ),
        pytest.param(lambda url: url.replace("&X-Amz-Expires=60", ""), id="expires-missing"),
        pytest.param(
            lambda url: url.replace("X-Amz-Expires=60", "X-Amz-Expires=soon"), id="expires-not-a-number"
        ),
        pytest.param(lambda url: url.replace("/?Action=", "/sts/?Action="), id="path-not-root"),
        pytest.param(lambda url: f"{url}&Extra=1", id="parameter-not-listed"),
        pytest.param(lambda url: f"{url}&Version=2011-06-15", id="parameter-twice"),
        pytest.param(lambda url: f"{url}&X-Amz-Security-Token={'A' * 4096}", id="token-over-4-KiB"),
    ],
)
def test_a_token_the_authenticator_refuses_before_asking_sts_is_refused(edit: Callable[[str], str]) -> None:
    with pytest.raises(TokenRejected):
        check_eks_token(resigned(edit), cluster_name=CLUSTER)


def test_a_token_signed_over_15_minutes_ago_is_refused_whatever_the_caller_says() -> None:
    old = dt.datetime.now(dt.UTC) - dt.timedelta(minutes=15, seconds=30)
    fresh = dt.datetime.now(dt.UTC) - dt.timedelta(minutes=14)
    assert check_eks_token(resigned(lambda url: url, now=fresh), cluster_name=CLUSTER)
    with pytest.raises(TokenRejected):
        check_eks_token(resigned(lambda url: url, now=old), cluster_name=CLUSTER)


def test_an_api_server_told_nothing_else_refuses_a_token_signed_16_minutes_ago() -> None:
    with KubeServer(cluster_name=CLUSTER) as server:
        stale = make_eks_token(CLUSTER, now=dt.datetime.now(dt.UTC) - dt.timedelta(minutes=16))
        config = Configuration(host=server.url)
        config.ssl_ca_cert = str(server.ca_file)
        config.api_key = {"authorization": stale}
        config.api_key_prefix = {"authorization": "Bearer"}
        with pytest.raises(ApiException) as refused:
            CoreV1Api(ApiClient(config)).list_namespace()
        assert refused.value.status == 401
        assert CoreV1Api(server.api_client()).list_namespace().items


def test_the_products_token_with_a_lambda_session_token_passes(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in {
        "AWS_ENDPOINT_URL": "http://127.0.0.1:5000",
        "AWS_REGION": "eu-west-1",
        "AWS_DEFAULT_REGION": "eu-west-1",
        "AWS_ACCESS_KEY_ID": "ASIADRAINFUNCTION000",
        "AWS_SECRET_ACCESS_KEY": SANDBOX_SECRET_KEY,
        "AWS_SESSION_TOKEN": SESSION_TOKEN,
    }.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(boto3, "DEFAULT_SESSION", None)
    token = EksTokens(CLUSTER).token()
    assert check_eks_token(token, cluster_name=CLUSTER) == "ASIADRAINFUNCTION000"
