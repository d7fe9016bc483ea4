"""EKS bearer tokens: ``k8s-aws-v1.`` + base64url(presigned STS GetCallerIdentity URL), made and checked.

The sandbox checks the shape a real EKS authenticator needs (it never verifies the signature: the STS side
is moto, which signs nothing), so a client that builds the token wrongly is refused with 401.
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import hashlib
import hmac
import re
from urllib.parse import parse_qs, quote, urlsplit

TOKEN_PREFIX = "k8s-aws-v1."
_BASE64URL = re.compile(r"^[A-Za-z0-9_-]+$")
_AMZ_DATE = "%Y%m%dT%H%M%SZ"


class TokenRejected(ValueError):
    """Why a bearer token is not an acceptable EKS token (logged; the client only sees 401)."""


ADMIN_ACCESS_KEY = (
    "AKIASANDBOXEXAMPLE"  # the key of the tokens the sandbox makes for itself: the cluster creator
)


def make_eks_token(
    cluster_name: str,
    sts_url_base: str = "https://sts.amazonaws.com/",
    *,
    now: dt.datetime | None = None,
    access_key: str = ADMIN_ACCESS_KEY,
) -> str:
    """A well-formed EKS token for ``cluster_name``, as ``aws eks get-token`` prints it (signature is fake).

    ``sts_url_base`` is the STS endpoint (e.g. moto's ``http://127.0.0.1:5000/``); its host names the region
    in the credential scope when it looks like ``sts.<region>.amazonaws.com``.
    """
    moment = (now or dt.datetime.now(dt.UTC)).astimezone(dt.UTC)
    match = re.match(r"^sts\.([a-z0-9-]+)\.amazonaws\.com$", urlsplit(sts_url_base).hostname or "")
    region = match.group(1) if match else "us-east-1"
    amz_date = moment.strftime(_AMZ_DATE)
    scope = f"{access_key}/{moment:%Y%m%d}/{region}/sts/aws4_request"
    query = (
        "Action=GetCallerIdentity&Version=2011-06-15&X-Amz-Algorithm=AWS4-HMAC-SHA256"
        f"&X-Amz-Credential={quote(scope, safe='')}&X-Amz-Date={amz_date}&X-Amz-Expires=60"
        "&X-Amz-SignedHeaders=host%3Bx-k8s-aws-id"
    )
    signature = hmac.new(cluster_name.encode(), query.encode(), hashlib.sha256).hexdigest()
    url = f"{sts_url_base.rstrip('/')}/?{query}&X-Amz-Signature={signature}"
    return TOKEN_PREFIX + base64.urlsafe_b64encode(url.encode()).decode().rstrip("=")


def check_eks_token(
    token: str, *, max_age_seconds: float | None = None, now: dt.datetime | None = None
) -> str:
    """The access key that signed ``token``; TokenRejected unless it is an EKS token (and, with
    ``max_age_seconds``, a fresh one)."""
    if not token.startswith(TOKEN_PREFIX):
        raise TokenRejected(f"token does not start with {TOKEN_PREFIX!r}")
    encoded = token[len(TOKEN_PREFIX) :]
    if not _BASE64URL.match(encoded):
        raise TokenRejected("token payload is not unpadded base64url")
    try:
        url = base64.urlsafe_b64decode(encoded + "=" * (-len(encoded) % 4)).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError) as exc:
        raise TokenRejected(f"token payload does not decode: {exc}") from None
    parts = urlsplit(url)
    if parts.scheme not in ("https", "http") or not parts.netloc:
        raise TokenRejected("token payload is not an http(s) URL")
    query = {k: v[-1] for k, v in parse_qs(parts.query, keep_blank_values=True).items()}
    if query.get("Action") != "GetCallerIdentity":
        raise TokenRejected("presigned URL is not an sts:GetCallerIdentity call")
    if not query.get("X-Amz-Signature"):
        raise TokenRejected("presigned URL has no X-Amz-Signature")
    if "x-k8s-aws-id" not in query.get("X-Amz-SignedHeaders", "").lower().split(";"):
        raise TokenRejected("presigned URL does not sign the x-k8s-aws-id header")
    if max_age_seconds is not None:
        try:
            signed_at = dt.datetime.strptime(query.get("X-Amz-Date", ""), _AMZ_DATE).replace(tzinfo=dt.UTC)
        except ValueError:
            raise TokenRejected("presigned URL has no valid X-Amz-Date") from None
        age = ((now or dt.datetime.now(dt.UTC)) - signed_at).total_seconds()
        if age > max_age_seconds:
            raise TokenRejected(
                f"token expired: signed {age:.0f}s ago, accepted up to {max_age_seconds:.0f}s"
            )
    access_key = query.get("X-Amz-Credential", "").split("/", 1)[0]
    if not access_key:
        raise TokenRejected("presigned URL has no X-Amz-Credential")
    return access_key


def bearer_token(authorization: str | None) -> str | None:
    if not authorization:
        return None
    scheme, _, value = authorization.partition(" ")
    return value.strip() if scheme.lower() == "bearer" and value.strip() else None
