"""The lines of launches waiting for a pool address: FakeLines (the unit tests') and DynamoAddressLines on moto
answer alike.

What the domain relies on (nodecycle.domain.eip.line): a line never written reads empty at version 0; a write
lands only over the version it read, and one over a stale version says so and changes nothing; the waiters
read back as written, in their order, with their times to the microsecond; the lines of two keys are apart."""

from __future__ import annotations

from datetime import timedelta

import pytest

from nodecycle.adapters.aws.address_lines import DynamoAddressLines
from nodecycle.domain.eip.line import AddressLines, Line, Waiter
from tests.contracts.conftest import aws
from tests.unit.eip.fakes import T0
from tests.unit.eip.test_pool_line import FakeLines

KEY = "stack-a/ci"


@pytest.fixture(params=["fake", "dynamodb"])
def lines(request: pytest.FixtureRequest) -> AddressLines:
    if request.param == "fake":
        return FakeLines()
    return DynamoAddressLines(request.getfixturevalue("lifecycle_table"), aws("dynamodb"))


def waiter(number: int, since: timedelta = timedelta()) -> Waiter:
    start = T0 + since + timedelta(microseconds=123456)
    return Waiter(start, f"i-{number:017x}/launch/token", f"i-{number:017x}", start + timedelta(seconds=600))


def test_a_line_never_written_reads_empty_at_version_0(lines: AddressLines) -> None:
    assert lines.read(KEY) == Line()


def test_the_waiters_read_back_as_written_in_their_order(lines: AddressLines) -> None:
    # Given a line written from nothing, its waiters in order of their wait
    written = (waiter(1), waiter(2, timedelta(seconds=15)), waiter(3, timedelta(seconds=30)))

    # When it is written and read back
    assert lines.write(KEY, written, 0)

    # Then it reads as written, at the next version; another pool's line is still empty
    assert lines.read(KEY) == Line(written, 1)
    assert lines.read("stack-a/other") == Line()


def test_a_write_over_a_stale_version_says_so_and_changes_nothing(lines: AddressLines) -> None:
    # Given a line written twice (version 2)
    assert lines.write(KEY, (waiter(1),), 0)
    assert lines.write(KEY, (waiter(1), waiter(2)), 1)

    # When a writer that read it at version 1, or one that read it never written, writes
    # Then neither lands, and the line is as the second write left it
    assert not lines.write(KEY, (waiter(3),), 1)
    assert not lines.write(KEY, (waiter(4),), 0)
    assert lines.read(KEY) == Line((waiter(1), waiter(2)), 2)


def test_a_line_emptied_reads_empty_and_its_version_goes_on(lines: AddressLines) -> None:
    # Given a line whose last waiter left
    assert lines.write(KEY, (waiter(1),), 0)
    assert lines.write(KEY, (), 1)

    # Then it reads empty, at a version a writer of the old one cannot write over
    assert lines.read(KEY) == Line((), 2)
    assert not lines.write(KEY, (waiter(2),), 1)
