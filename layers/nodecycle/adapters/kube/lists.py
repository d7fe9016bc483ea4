"""Lists that cost what they must and no more: paged, from the API server's watch cache, and, where the
objects' metadata is enough, without their spec and status.

Responses are read as raw JSON (``_preload_content=False``): the client's models are slow to build for
whole objects, and the adapters need a few fields of each.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

from nodecycle.adapters.kube.errors import kube_errors

# What a metadata-only client asks for: each object's metadata (name, labels, annotations, version), not its
# spec and status, which make most of a node's bytes.
METADATA_LIST = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"
# resourceVersion=0: any version will do, so the API server answers from its watch cache instead of a
# quorum read of etcd (older servers then send every object at once, whatever the limit: handled alike).
ANY_VERSION = "0"
PAGE = 500


def pages(
    list_call: Callable[..., Any],
    what: str,
    *,
    metadata_only: bool = False,
    consistent: bool = False,
    **query: Any,
) -> Iterator[dict[str, Any]]:
    """Each object of a paged list, as JSON. ``list_call`` is a client method such as
    ``CoreV1Api.list_node``; ``query`` its selectors and request timeout. ``consistent``: the objects as they
    are now (no resourceVersion named), not from the watch cache, which may lag behind writes acknowledged
    before the list."""
    headers = {"Accept": METADATA_LIST} if metadata_only else {}
    token: str | None = None
    while True:
        with kube_errors(what):
            response = list_call(
                limit=PAGE,
                _continue=token,
                # a continued page is read at the version of the first: naming one again is refused
                resource_version=None if token or consistent else ANY_VERSION,
                _headers=headers,
                _preload_content=False,
                **query,
            )
            page = json.loads(response.data)
        yield from page.get("items") or []
        token = (page.get("metadata") or {}).get("continue")
        if not token:
            return
