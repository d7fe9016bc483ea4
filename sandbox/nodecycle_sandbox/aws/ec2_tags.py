"""EC2 tags looked up by their resource, where moto scans every tag of the account.

moto's ``TaggedEC2Resource.get_tags`` asks ``TagBackend.describe_tags`` with a ``resource-id`` filter, which
matches a regular expression against every tag of every resource ever tagged, terminated instances and
released addresses included. A DescribeAddresses with a tag filter calls it for each address, and again for
each address it answers with, so its cost grows with the account's history. In a long campaign the sandbox's
AWS side spent a third of its time there (py-spy on the AWS process, scenario 211 of seed 5) and slowed
scenario by scenario, until the deliveries it paced came late. The answer is the one moto gives (for an id of
EC2's fixed length); only the lookup is direct.

A released address's tags are forgotten with it (``ec2_addresses.py``), as EC2 forgets them.
"""

from __future__ import annotations

from moto.ec2.models.core import TaggedEC2Resource
from moto.ec2.utils import EC2_PREFIX_TO_RESOURCE, get_prefix

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
    setattr(TaggedEC2Resource, _MARKER, True)
