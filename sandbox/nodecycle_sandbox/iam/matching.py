"""Wildcard matching as IAM does it: ``*`` (any run) and ``?`` (one character); ARNs segment by segment."""

from __future__ import annotations

import re
from functools import lru_cache

_ARN_SEGMENTS = 6  # arn:partition:service:region:account:resource (the resource may hold ':' and '/')


@lru_cache(maxsize=4096)
def _pattern(glob: str, ignore_case: bool) -> re.Pattern[str]:
    parts = (".*" if c == "*" else "." if c == "?" else re.escape(c) for c in glob)
    return re.compile("".join(parts), re.IGNORECASE | re.DOTALL if ignore_case else re.DOTALL)


def like(glob: str, value: str, *, ignore_case: bool = False) -> bool:
    return _pattern(glob, ignore_case).fullmatch(value) is not None


def action_matches(pattern: str, action: str) -> bool:
    """Actions compare without regard to case: ``ec2:describe*`` matches ``ec2:DescribeAddresses``."""
    return like(pattern, action, ignore_case=True)


def arn_matches(pattern: str, arn: str) -> bool:
    """``*`` alone matches every resource; otherwise the first five segments match one by one (a wildcard
    never spans a ``:`` there) and the resource part matches as a whole."""
    if pattern == "*":
        return True
    wanted = pattern.split(":", _ARN_SEGMENTS - 1)
    given = arn.split(":", _ARN_SEGMENTS - 1)
    if len(wanted) != _ARN_SEGMENTS or len(given) != _ARN_SEGMENTS:
        # Not two ARNs: a pattern short of segments matches no ARN; other strings compare as globs.
        return len(wanted) == len(given) and like(pattern, arn)
    return all(like(w, g) for w, g in zip(wanted, given, strict=True))
