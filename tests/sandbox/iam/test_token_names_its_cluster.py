"""An EKS token is for one cluster: the presigned STS URL signs the header ``x-k8s-aws-id: <cluster>``, which EKS's
authenticator sends with its own cluster's name, so STS refuses (and EKS answers 401) a token signed for another.
``check_eks_token`` told the cluster checks that signature as STS does (every sandbox key's secret is the same); a
token the product makes (``EksTokens``, botocore's presigner, awscrt's if installed) or the sandbox makes
(``make_eks_token``) passes for its cluster and no other, and the API server checks each token against its own
cluster's name (``kube/server.py``)."""

from __future__ import annotations

import base64
import datetime as dt
from collections.abc import Iterator

import boto3
import pytest
from kubernetes import client
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
from nodecycle_sandbox.runner.runner import SANDBOX_SECRET_KEY as RUNNER_SECRET_KEY

KEY = "AKIADRAINFUNCTION000"


def product_token(monkeypatch: pytest.MonkeyPatch, cluster: str) -> str:
    """The token the product's adapter signs for ``cluster`` with a function's credentials."""
    for name, value in {
        "AWS_ENDPOINT_URL": "http://127.0.0.1:5000",
        "AWS_REGION": "eu-west-1",
        "AWS_DEFAULT_REGION": "eu-west-1",
        "AWS_ACCESS_KEY_ID": KEY,
        "AWS_SECRET_ACCESS_KEY": SANDBOX_SECRET_KEY,
    }.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("AWS_SESSION_TOKEN", raising=False)
    # (boto3's default session keeps the credentials it resolved first: another test's in this worker, else)
    monkeypatch.setattr(boto3, "DEFAULT_SESSION", None)
    return EksTokens(cluster).token()


def test_the_sandbox_checks_with_the_secret_its_keys_have() -> None:
    assert SANDBOX_SECRET_KEY == RUNNER_SECRET_KEY


def test_a_token_the_product_signs_passes_for_its_cluster_and_no_other(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    token = product_token(monkeypatch, "sandbox")
    assert check_eks_token(token, cluster_name="sandbox") == KEY
    with pytest.raises(TokenRejected, match="x-k8s-aws-id: prod"):
        check_eks_token(token, cluster_name="prod")


def test_a_token_the_sandbox_makes_passes_for_its_cluster_and_no_other() -> None:
    for sts in ("https://sts.eu-west-1.amazonaws.com/", "http://127.0.0.1:5000"):
        token = make_eks_token("sandbox", sts, now=dt.datetime.now(dt.UTC))
        assert check_eks_token(token, cluster_name="sandbox") == "AKIASANDBOXEXAMPLE"
        with pytest.raises(TokenRejected):
            check_eks_token(token, cluster_name="sandbox-2")


def test_a_token_signed_with_another_secret_is_refused() -> None:
    made = make_eks_token("sandbox")
    url = base64.urlsafe_b64decode(made.removeprefix(TOKEN_PREFIX) + "==").decode()
    unsigned = url.rsplit("&X-Amz-Signature=", 1)[0]
    forged = f"{unsigned}&X-Amz-Signature={presigned_signature(unsigned, 'sandbox', 'not-the-keys-secret')}"
    token = TOKEN_PREFIX + base64.urlsafe_b64encode(forged.encode()).decode().rstrip("=")
    with pytest.raises(TokenRejected):
        check_eks_token(token, cluster_name="sandbox")


@pytest.fixture
def server() -> Iterator[KubeServer]:
    with KubeServer(cluster_name="sandbox") as started:
        yield started


def status_with(server: KubeServer, token: str) -> int:
    config = client.Configuration(host=server.url)
    config.ssl_ca_cert = str(server.ca_file)
    config.api_key = {"authorization": token}
    config.api_key_prefix = {"authorization": "Bearer"}
    try:
        client.CoreV1Api(client.ApiClient(config)).list_namespace()
    except ApiException as refused:
        return int(refused.status)
    return 200


def test_the_api_server_answers_401_to_a_token_for_another_cluster(server: KubeServer) -> None:
    assert (status_with(server, make_eks_token("sandbox")), status_with(server, make_eks_token("prod"))) == (
        200,
        401,
    )
