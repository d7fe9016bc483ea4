"""EC2 tags looked up by their resource, where moto scans every tag of the account.

moto's ``TaggedEC2Resource.get_tags`` asks ``TagBackend.describe_tags`` with a ``resource-id`` filter, which
matches a regular expression against every tag of every resource ever tagged, terminated instances and
released addresses included. A DescribeAddresses with a tag filter calls it for each address, and again for
each address it answers with, so its cost grows with the account's history. In a long campaign the sandbox's
AWS side spent a third of its time there (py-spy on the AWS process, scenario 211 of seed 5) and slowed
scenario by scenario, until the deliveries it paced came late. The answer is the one moto gives (for an id of
EC2's fixed length); only the lookup is direct.

A released address's tags are forgotten with it (``ec2_addresses.py``), as EC2 forgets them. Nor can they come back:
CreateTags naming an Elastic IP EC2 does not have (released, or never allocated) is refused, the whole request,
``InvalidAllocationID.NotFound`` (the code EC2 gives a tag of an id it does not know: "Eventual consistency in the
Amazon EC2 API", whose lagging form ``ec2_consistency.py`` answers). moto tagged any id: DescribeTags then listed
tags of an address that no longer existed, and a tool that tags an address after allocating it (an operator adding
one to a pool) was never told that the address it tagged was gone.

The tags a caller gives (CreateTags, AllocateAddress's TagSpecifications) are held to EC2's tag restrictions
("Tag restrictions", Tag your Amazon EC2 resources, EC2 user guide): a key of at most 128 characters, a value of
at most 256, and no key beginning with ``aws:`` in any case (reserved for AWS). EC2 refuses the whole request
with ``InvalidParameterValue`` ("Value ( aws:x ) for parameter key is invalid. Tag keys starting with 'aws:' are
reserved for internal use", "Tag value exceeds the maximum length of 256 characters"); moto stored any tag. Only
callers' tags are checked: AWS's own (``aws:autoscaling:groupName`` on a group's instances) are set inside.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from functools import wraps
from typing import Any

from moto.core.responses import ActionResult
from moto.ec2.exceptions import EC2ClientError
from moto.ec2.models.core import TaggedEC2Resource
from moto.ec2.responses.elastic_ip_addresses import ElasticIPAddresses
from moto.ec2.responses.tags import TagResponse
from moto.ec2.utils import EC2_PREFIX_TO_RESOURCE, get_prefix

MAX_KEY_LENGTH = 128
MAX_VALUE_LENGTH = 256

_MARKER = "_nodecycle_sandbox_tags"


def install() -> None:
    """Idempotent: a second call changes nothing."""
    if getattr(TaggedEC2Resource, _MARKER, False):
        return

    def get_tags(self: TaggedEC2Resource) -> list[dict[str, str]]:
        resource_id = getattr(self, "id", None)
        if not resource_id:
            return []
        tags = self.ec2_backend.tags.get(resource_id)  # type: ignore[attr-defined]  # .get: a defaultdict
        if not tags:
            return []
        kind = EC2_PREFIX_TO_RESOURCE.get(get_prefix(resource_id), "")
        return [
            {"resource_id": resource_id, "key": key, "value": value, "resource_type": kind}
            for key, value in tags.items()
        ]

    TaggedEC2Resource.get_tags = get_tags  # type: ignore[method-assign]
    setattr(TagResponse, "create_tags", _checked(TagResponse.create_tags, _create_tags_tags))  # noqa: B010
    setattr(  # noqa: B010
        ElasticIPAddresses,
        "allocate_address",
        _checked(ElasticIPAddresses.allocate_address, _specified_tags),
    )
    setattr(TaggedEC2Resource, _MARKER, True)


def check_tags(tags: Iterable[dict[str, Any]]) -> None:
    """Refuse what EC2 refuses of a caller's tags, with its error."""
    for tag in tags:
        key, value = str(tag.get("Key", "")), str(tag.get("Value", ""))
        if key.lower().startswith("aws:"):
            raise EC2ClientError(
                "InvalidParameterValue",
                f"Value ( {key} ) for parameter key is invalid. Tag keys starting with 'aws:' are reserved for "
                "internal use",
            )
        if len(key) > MAX_KEY_LENGTH:
            raise EC2ClientError(
                "InvalidParameterValue", f"Tag key exceeds the maximum length of {MAX_KEY_LENGTH} characters"
            )
        if len(value) > MAX_VALUE_LENGTH:
            raise EC2ClientError(
                "InvalidParameterValue",
                f"Tag value exceeds the maximum length of {MAX_VALUE_LENGTH} characters",
            )


def _create_tags_tags(request: TagResponse) -> list[dict[str, Any]]:
    known_addresses(request)
    return list(request._get_param("Tags", []))


def known_addresses(request: TagResponse) -> None:
    """Refuse a CreateTags naming an Elastic IP (by its allocation id) that EC2 does not have, as EC2 does."""
    backend: Any = request.ec2_backend
    allocations = {address.allocation_id for address in backend.addresses}
    for resource in request._get_param("Resources", []):
        if str(resource).startswith("eipalloc-") and resource not in allocations:
            raise EC2ClientError(
                "InvalidAllocationID.NotFound", f"The allocation ID '{resource}' does not exist"
            )


def _specified_tags(request: ElasticIPAddresses) -> list[dict[str, Any]]:
    return [tag for spec in request._get_param("TagSpecifications", []) for tag in spec.get("Tags", [])]


def _checked[R](
    operation: Callable[[R], ActionResult], tags_of: Callable[[R], list[dict[str, Any]]]
) -> Callable[[R], ActionResult]:
    @wraps(operation)
    def checked(self: R) -> ActionResult:
        check_tags(tags_of(self))
        return operation(self)

    return checked
