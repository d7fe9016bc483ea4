"""DynamoDB item sizes counted with the overhead of lists and maps, as DynamoDB counts them.

"An attribute of type List or Map requires 3 bytes of overhead, regardless of its contents ... Each List or Map
element also requires 1 byte of overhead" (DynamoDB developer guide, "DynamoDB item sizes and formats"). moto
counts a list or a map as the sum of its elements (and a map's keys) alone, so an item made of many small maps (a
line of waiters, a record's scratch space of one entry per pod) took up to several bytes an element less in the
sandbox than in DynamoDB: one that DynamoDB refuses as over its item size limit (a ValidationException no retry
changes) could be taken here. moto's own limit (405,000 bytes, under DynamoDB's 400 KB) and its count of a number
(every character of it, where DynamoDB takes about one byte per two digits) stay: they only count more.

Here a list or a map counts 3 bytes, and 1 byte per element, on top of what moto counts: in the size moto checks
against its limit (each write of an item), and in the size of a page of a Query or Scan.
"""

from __future__ import annotations

from moto.dynamodb.models.dynamo_type import DynamoType

_MARKER = "_nodecycle_sandbox_sizes"
LIST_OR_MAP_OVERHEAD = 3  # bytes, whatever the contents
ELEMENT_OVERHEAD = 1  # bytes, per element of a list or a map


def install() -> None:
    """Idempotent: a second call changes nothing."""
    if getattr(DynamoType, _MARKER, False):
        return
    counted = DynamoType.size

    def size(self: DynamoType) -> int:
        moto_counts = counted(self)
        if not (self.is_list() or self.is_map()):
            return moto_counts
        # (moto's count of a list or map sums its elements' size(), this one included: their overhead is in it)
        return moto_counts + LIST_OR_MAP_OVERHEAD + ELEMENT_OVERHEAD * len(self.value)

    size.__wrapped__ = counted  # type: ignore[attr-defined]
    DynamoType.size = size  # type: ignore[method-assign]
    setattr(DynamoType, _MARKER, True)
