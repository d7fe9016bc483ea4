"""What a read answers with, chosen from its ``Accept`` header as kube-apiserver chooses it: the objects, a
server-side printed ``Table`` (kubectl get), or only their metadata (``PartialObjectMetadata`` and
``PartialObjectMetadataList``, what metadata-only informers and clients ask for)."""

from __future__ import annotations

from enum import Enum

from nodecycle_sandbox.kube import errors
from nodecycle_sandbox.kube.meta import JsonObj, metadata

META_GROUP = "meta.k8s.io"
META_VERSIONS = ("v1", "v1beta1")
_JSON = frozenset({"application/json", "application/*", "*/*"})


class Representation(Enum):
    OBJECT = "object"
    TABLE = "table"
    METADATA = "metadata"


def negotiate(accept: str, *, is_list: bool) -> tuple[Representation, str]:
    """The representation and, for ``meta.k8s.io`` ones, its version, from the alternatives of ``accept`` in
    order. An ``as=`` the server does not offer (an unknown kind, another group) is refused with 406 unless a
    later alternative is acceptable; the metadata kind that does not fit the request (``PartialObjectMetadata`` of
    a list, ``PartialObjectMetadataList`` of one object) is refused with 406 whatever follows it. Media types
    the sandbox does not speak (protobuf, YAML) are skipped; with nothing else asked for, JSON is sent."""
    refused: list[str] = []
    for media, params in _alternatives(accept):
        if media not in _JSON:
            continue
        wanted = params.get("as")
        if wanted is None:
            return Representation.OBJECT, ""
        version = params.get("v", "")
        if params.get("g") != META_GROUP or version not in META_VERSIONS:
            refused.append(f"{wanted};g={params.get('g')};v={version}")
            continue
        if wanted == "Table":
            return Representation.TABLE, version
        if wanted == ("PartialObjectMetadataList" if is_list else "PartialObjectMetadata"):
            return Representation.METADATA, version
        if wanted in ("PartialObjectMetadata", "PartialObjectMetadataList"):
            # The other metadata kind: kube-apiserver's negotiation takes either for any endpoint (its
            # AllowsMediaTypeTransform: "TODO: should delineate between lists and non-list endpoints"), and its
            # transform refuses it (asPartialObjectMetadata, asPartialObjectMetadataList), whatever comes after
            raise errors.ApiError(
                406,
                "NotAcceptable",
                f"you requested {wanted}, but the requested object is "
                + ("a list" if is_list else "not a list"),
            )
        refused.append(wanted)
    if refused:
        raise errors.ApiError(
            406,
            "NotAcceptable",
            f"the server was unable to respond with a content type that the client supports: {', '.join(refused)}"
            f" ({'a list' if is_list else 'an object'} was requested)",
        )
    return Representation.OBJECT, ""


def partial_object(obj: JsonObj, version: str) -> JsonObj:
    return {
        "kind": "PartialObjectMetadata",
        "apiVersion": f"{META_GROUP}/{version}",
        "metadata": metadata(obj),
    }


def partial_list(listed: JsonObj, version: str) -> JsonObj:
    return {
        "kind": "PartialObjectMetadataList",
        "apiVersion": f"{META_GROUP}/{version}",
        "metadata": listed["metadata"],
        "items": [partial_object(item, version) for item in listed["items"]],
    }


def _alternatives(accept: str) -> list[tuple[str, dict[str, str]]]:
    found = []
    for alternative in accept.split(","):
        media, *parameters = (part.strip() for part in alternative.split(";"))
        if not media:
            continue
        params = {}
        for parameter in parameters:
            key, _, value = parameter.partition("=")
            params[key.strip()] = value.strip()
        found.append((media.lower(), params))
    return found
