"""EKS bearer tokens: ``k8s-aws-v1.`` + base64url(presigned STS GetCallerIdentity URL), made and checked.

The sandbox checks the shape a real EKS authenticator needs, so a client that builds the token wrongly is
refused with 401; told its cluster's name, it also checks the SigV4 signature as STS would with the header
``x-k8s-aws-id: <cluster>`` the authenticator adds (every sandbox key has the same secret,
``SANDBOX_SECRET_KEY``): a token signed for another cluster is 401, as on EKS.

What aws-iam-authenticator (``pkg/token``, ``Verify``) refuses before it asks STS is refused here too: a token
over 4 KiB, a URL path other than ``/``, a query parameter outside its list or given twice, ``X-Amz-Expires``
missing or over 900 s, ``X-Amz-Date`` missing, and a URL signed more than 15 minutes ago (whatever its
X-Amz-Expires: STS honours a presigned GetCallerIdentity for 15 minutes). Not checked, because the sandbox's STS
is moto on loopback over HTTP: that the scheme is https and the host an STS endpoint of the cluster's partition.
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
TOKEN_LIFETIME_SECONDS = 900  # the authenticator's presignedURLExpiration: 15 minutes after X-Amz-Date
MAX_TOKEN_BYTES = 4096  # its maxTokenLenBytes
MAX_EXPIRES_SECONDS = 900  # the largest X-Amz-Expires it takes (0.3.0 and earlier: 60)
# The only query parameters it lets through to STS (compared lower-cased)
_PARAMETERS = frozenset(
    {
        "action",
        "version",
        "x-amz-algorithm",
        "x-amz-credential",
        "x-amz-date",
        "x-amz-expires",
        "x-amz-security-token",
        "x-amz-signature",
        "x-amz-signedheaders",
    }
)


class TokenRejected(ValueError):
    """Why a bearer token is not an acceptable EKS token (logged; the client only sees 401)."""


ADMIN_ACCESS_KEY = (
    "AKIASANDBOXEXAMPLE"  # the key of the tokens the sandbox makes for itself: the cluster creator
)
SANDBOX_SECRET_KEY = "sandbox-secret-access-key"  # every sandbox key's secret (the runner's, the operator's)
# Keys of another secret that STS knows: the pair moto's mock_aws sets in the environment of what runs under
# it, and the test suite's fake credentials.
_SECRETS = {"FOOBARKEY": "FOOBARSECRET", "testing": "testing"}
CLUSTER_ID_HEADER = "x-k8s-aws-id"
# What a presigned URL's canonical request has for its payload: botocore's own signer says it is unsigned,
# awscrt's (botocore's when installed) signs the empty body of a GET; STS takes either.
_UNSIGNED_PAYLOAD = "UNSIGNED-PAYLOAD"
_EMPTY_PAYLOAD = hashlib.sha256(b"").hexdigest()


def make_eks_token(
    cluster_name: str,
    sts_url_base: str = "https://sts.amazonaws.com/",
    *,
    now: dt.datetime | None = None,
    access_key: str = ADMIN_ACCESS_KEY,
) -> str:
    """A well-formed EKS token for ``cluster_name``, as ``aws eks get-token`` prints it (signed with
    ``SANDBOX_SECRET_KEY``).

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
    url = f"{sts_url_base.rstrip('/')}/?{query}"
    signature = presigned_signature(url, cluster_name, SANDBOX_SECRET_KEY)
    url = f"{url}&X-Amz-Signature={signature}"
    return TOKEN_PREFIX + base64.urlsafe_b64encode(url.encode()).decode().rstrip("=")


def check_eks_token(
    token: str,
    *,
    max_age_seconds: float | None = TOKEN_LIFETIME_SECONDS,
    now: dt.datetime | None = None,
    cluster_name: str | None = None,
) -> str:
    """The access key that signed ``token``; TokenRejected unless it is an EKS token the authenticator takes
    (signed at most ``max_age_seconds`` ago, 15 minutes by default, None: of any age; with ``cluster_name``,
    one signed for that cluster)."""
    if len(token) > MAX_TOKEN_BYTES:
        raise TokenRejected(f"token is too large: {len(token)} bytes, at most {MAX_TOKEN_BYTES}")
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
    if parts.path != "/":
        raise TokenRejected("unexpected path in pre-signed URL")
    parsed = parse_qs(parts.query, keep_blank_values=True)
    for key, values in parsed.items():
        if key.lower() not in _PARAMETERS:
            raise TokenRejected(f"non-whitelisted query parameter {key!r}")
        if len(values) != 1:
            raise TokenRejected("query parameter with multiple values not supported")
    query = {k: v[-1] for k, v in parsed.items()}
    if query.get("Action") != "GetCallerIdentity":
        raise TokenRejected("presigned URL is not an sts:GetCallerIdentity call")
    if not query.get("X-Amz-Signature"):
        raise TokenRejected("presigned URL has no X-Amz-Signature")
    if "x-k8s-aws-id" not in query.get("X-Amz-SignedHeaders", "").lower().split(";"):
        raise TokenRejected("presigned URL does not sign the x-k8s-aws-id header")
    expires = query.get("X-Amz-Expires", "")
    if not expires.isdigit() or int(expires) > MAX_EXPIRES_SECONDS:
        raise TokenRejected(f"invalid X-Amz-Expires parameter in pre-signed URL: {expires!r}")
    try:
        signed_at = dt.datetime.strptime(query.get("X-Amz-Date", ""), _AMZ_DATE).replace(tzinfo=dt.UTC)
    except ValueError:
        raise TokenRejected("presigned URL has no valid X-Amz-Date") from None
    if max_age_seconds is not None:
        age = ((now or dt.datetime.now(dt.UTC)) - signed_at).total_seconds()
        if age > max_age_seconds:
            raise TokenRejected(
                f"token expired: signed {age:.0f}s ago, accepted up to {max_age_seconds:.0f}s"
            )
    access_key = query.get("X-Amz-Credential", "").split("/", 1)[0]
    if not access_key:
        raise TokenRejected("presigned URL has no X-Amz-Credential")
    if cluster_name is not None:
        unsigned = "&".join(p for p in parts.query.split("&") if not p.startswith("X-Amz-Signature="))
        presigned = parts._replace(query=unsigned).geturl()
        given, secret = query["X-Amz-Signature"], _SECRETS.get(access_key, SANDBOX_SECRET_KEY)
        if not any(
            hmac.compare_digest(presigned_signature(presigned, cluster_name, secret, payload), given)
            for payload in (_UNSIGNED_PAYLOAD, _EMPTY_PAYLOAD)
        ):
            raise TokenRejected(
                f"signature does not match with {CLUSTER_ID_HEADER}: {cluster_name} (a token for another cluster)"
            )
    return access_key


def presigned_signature(
    url: str, cluster_name: str, secret_key: str, payload: str = _UNSIGNED_PAYLOAD
) -> str:
    """The SigV4 signature of a presigned GET ``url`` (its query without X-Amz-Signature) whose signed headers
    are sent with ``x-k8s-aws-id: cluster_name``: what STS computes when EKS's authenticator forwards it."""
    parts = urlsplit(url)
    query = {k: v[-1] for k, v in parse_qs(parts.query, keep_blank_values=True).items()}
    # botocore's canonical query: the URL's own encoded pairs, sorted
    pairs = sorted(pair.partition("=")[::2] for pair in parts.query.split("&") if pair)
    canonical_query = "&".join(f"{key}={value}" for key, value in pairs)
    header_values = {"host": _host(parts.scheme, parts.netloc), CLUSTER_ID_HEADER: cluster_name}
    signed = query.get("X-Amz-SignedHeaders", "")
    try:
        canonical_headers = "".join(f"{name}:{header_values[name]}\n" for name in signed.split(";"))
    except KeyError as unknown:
        raise TokenRejected(
            f"presigned URL signs a header the authenticator does not send: {unknown}"
        ) from None
    canonical_request = "\n".join(
        ["GET", quote(parts.path or "/", safe="/~"), canonical_query, canonical_headers, signed, payload]
    )
    _, _, scope = query.get("X-Amz-Credential", "").partition("/")
    day, region, service, _ = [*scope.split("/"), "", "", "", ""][:4]
    string_to_sign = "\n".join(
        [
            "AWS4-HMAC-SHA256",
            query.get("X-Amz-Date", ""),
            scope,
            hashlib.sha256(canonical_request.encode()).hexdigest(),
        ]
    )
    key = f"AWS4{secret_key}".encode()
    for part in (day, region, service, "aws4_request"):
        key = hmac.new(key, part.encode(), hashlib.sha256).digest()
    return hmac.new(key, string_to_sign.encode(), hashlib.sha256).hexdigest()


def _host(scheme: str, netloc: str) -> str:
    # botocore signs the host without the scheme's default port
    host, _, port = netloc.rpartition(":") if ":" in netloc.rsplit("]", 1)[-1] else (netloc, "", "")
    if (scheme, port) in (("https", "443"), ("http", "80")):
        return host
    return netloc


def bearer_token(authorization: str | None) -> str | None:
    if not authorization:
        return None
    scheme, _, value = authorization.partition(" ")
    return value.strip() if scheme.lower() == "bearer" and value.strip() else None
