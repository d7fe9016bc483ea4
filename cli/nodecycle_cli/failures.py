"""What went wrong around a command, in one line: missing credentials, kubeconfig, region, stack.

A person who runs ``nodecycle status`` without AWS credentials or ``nodecycle budget show`` without a
kubeconfig needs to read what to do, not a traceback (``-v`` still shows the traceback).
"""

from __future__ import annotations

import os
import sys
from typing import Any
from urllib.parse import urlsplit


class CommandError(Exception):
    """A problem the command found and explained itself (its message is the whole explanation)."""


def explain(error: BaseException) -> str | None:
    """One line for the errors the environment causes; None for anything else (a bug: keep the traceback)."""
    cause: BaseException | None = error
    while cause is not None:  # the product's adapters wrap some (a TransientError from a connection error)
        if isinstance(cause, CommandError):
            return str(cause)
        for explainer in (_aws, _kubernetes):
            reason = explainer(cause)
            if reason is not None:
                return reason
        cause = cause.__cause__
    return None


def _aws(error: BaseException) -> str | None:
    exceptions = sys.modules.get("botocore.exceptions")
    if exceptions is None:
        return None  # botocore was never imported: the error cannot be one of its own
    if isinstance(error, exceptions.NoCredentialsError | exceptions.PartialCredentialsError):
        return (
            "no AWS credentials found (the usual chain: AWS_PROFILE, AWS_ACCESS_KEY_ID and "
            "AWS_SECRET_ACCESS_KEY, ~/.aws/config, SSO): run `aws configure` or `aws sso login`, or set AWS_PROFILE"
        )
    if isinstance(error, exceptions.NoRegionError):
        return "no AWS region: set AWS_REGION (or AWS_DEFAULT_REGION), or pass --region"
    if isinstance(error, exceptions.TokenRetrievalError | exceptions.SSOTokenLoadError):
        return f"the AWS SSO session cannot be used ({error}): run `aws sso login`"
    if isinstance(error, exceptions.EndpointConnectionError | exceptions.ConnectTimeoutError):
        return f"cannot reach AWS: {error}{endpoint_note(error.kwargs.get('endpoint_url'))}"
    parsers = sys.modules.get("botocore.parsers")
    if parsers is not None and isinstance(error, parsers.ResponseParserError):
        # (botocore's error names neither the call nor the endpoint: the variable is the likely cause)
        endpoint = os.environ.get("AWS_ENDPOINT_URL")
        return f"the answer to {_call(error)} is not an AWS answer ({str(error).splitlines()[0]})" + (
            endpoint_note(endpoint) if endpoint else ": a proxy between here and AWS?"
        )
    if isinstance(error, exceptions.ClientError):
        return _credentials(error) or aws_answer(error)
    return None


def endpoint_note(url: str | None) -> str:
    """What to add to a failure of a call made at ``url`` when that is not AWS's endpoint: the sandbox's environment
    file sets AWS_ENDPOINT_URL (and its keys, which botocore prefers to a profile), and a shell that sourced it
    asks the sandbox about a real stack, or, once the sandbox stopped, nobody."""
    if not url or (urlsplit(url).hostname or "").endswith(AWS_HOSTS):
        return ""
    return (
        f" (asked at {url}, which is not AWS: AWS_ENDPOINT_URL, or an endpoint_url of the AWS config, sends the "
        "calls there, as the sandbox's environment file does; unset AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID and "
        "AWS_SECRET_ACCESS_KEY to reach AWS)"
    )


AWS_HOSTS = (".amazonaws.com", ".amazonaws.com.cn", ".api.aws")


def _call(error: BaseException) -> str:
    """The operation a botocore error came from, when the traceback tells it (ResponseParserError does not say)."""
    trace = error.__traceback__
    while trace is not None:
        name = trace.tb_frame.f_locals.get("operation_name")
        if isinstance(name, str):
            return name
        trace = trace.tb_next
    return "an AWS call"


# AWS's answers to a call signed with credentials that expired (the query protocol's code, the JSON protocols') or
# that it does not know (keys deleted, mistyped, or of another partition): the caller's own, whatever the call
EXPIRED = ("ExpiredToken", "ExpiredTokenException")
UNKNOWN = ("InvalidClientTokenId", "UnrecognizedClientException", "InvalidAccessKeyId", "AuthFailure")


def _credentials(error: Any) -> str | None:
    code = error.response.get("Error", {}).get("Code")
    if code not in EXPIRED + UNKNOWN:
        return None
    said = f"{code}: {error.response.get('Error', {}).get('Message')}"
    state = "expired" if code in EXPIRED else "not valid"
    return (
        f"the AWS credentials are {state} (AWS answered {error.operation_name} with {said}): renew them (aws sso "
        "login, a new session of the role, or new keys) and run the command again; aws sts get-caller-identity "
        "tells which credentials the chain finds"
    )


def aws_answer(error: Any) -> str:
    """AWS's error answer to a call (a botocore ClientError), said for what it is: a refusal says what to grant,
    and a throttle or a failure of AWS's own, which botocore's retries did not get past, is no refusal (said as
    one, it sent the operator looking for a permission to grant where none was missing)."""
    from nodecycle.adapters.aws.clients import error_code, is_access_refused, is_transient

    said = f"{error_code(error)}: {error.response.get('Error', {}).get('Message')}"
    if is_access_refused(error):
        return (
            f"AWS refused {error.operation_name} ({said}): grant that action to the identity the command runs "
            "as (aws sts get-caller-identity), or run it as one that has it"
        )
    if is_transient(error):
        return (
            f"AWS throttled or failed {error.operation_name} ({said}), still after botocore's retries (no "
            "permission is missing): run the command again in a moment"
        )
    return f"AWS answered {error.operation_name} with {said}"


def _kubernetes(error: BaseException) -> str | None:
    config = sys.modules.get("kubernetes.config.config_exception")
    if config is not None and isinstance(error, config.ConfigException):
        return (
            f"no usable kubeconfig ({error}): set KUBECONFIG or pass --kubeconfig "
            "(for EKS: aws eks update-kubeconfig --name CLUSTER)"
        )
    rest = sys.modules.get("kubernetes.client.exceptions")
    if rest is not None and isinstance(error, rest.ApiException):
        if error.status == 401:
            return "the cluster refused the kubeconfig's credentials (401 Unauthorized): renew them"
        if error.status == 403:
            return f"the cluster forbids it (403): {_status_message(error)}"
        return f"the Kubernetes API answered {error.status} {error.reason}: {_status_message(error)}"
    urllib3 = sys.modules.get("urllib3.exceptions")
    if urllib3 is not None and isinstance(error, urllib3.MaxRetryError | urllib3.NewConnectionError):
        return f"cannot reach the Kubernetes API: {error}"
    return None


def _status_message(error: object) -> str:
    import json

    body = getattr(error, "body", None)
    try:
        return str(json.loads(body or "{}").get("message") or body)
    except (TypeError, ValueError):
        return str(body)
