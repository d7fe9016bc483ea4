"""What the doctor found: one finding per thing checked, said for a person (and as JSON for a script)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from enum import StrEnum


class Status(StrEnum):
    OK = "ok"
    PROBLEM = "problem"  # something is wrong: what, why it matters, the command that fixes it
    WARNING = "warning"  # works, but not as it should (e.g. a hook's default result)
    UNCHECKED = "unchecked"  # the doctor could not look (an API not served, a permission it lacks)


@dataclass(frozen=True)
class Finding:
    check: str  # a stable id, e.g. "eventbridge.rule.sweeper schedule"
    status: Status
    what: str
    why: str = ""
    fix: str = ""

    @classmethod
    def ok(cls, check: str, what: str) -> Finding:
        return cls(check, Status.OK, what)

    @classmethod
    def problem(cls, check: str, what: str, why: str, fix: str) -> Finding:
        return cls(check, Status.PROBLEM, what, why, fix)

    @classmethod
    def warning(cls, check: str, what: str, why: str, fix: str) -> Finding:
        return cls(check, Status.WARNING, what, why, fix)

    @classmethod
    def unchecked(cls, check: str, what: str, fix: str = "") -> Finding:
        return cls(check, Status.UNCHECKED, f"cannot check: {what}", "", fix)


# Exit statuses, for scripts: 0 all good; 1 a problem or a warning; 3 nothing wrong found, but some checks
# could not be made. Not 2: that is what the command exits with when it could not run at all (argparse's usage
# errors, and nodecycle_cli.main's one-line failures: no such stack, no credentials), which a script must not
# read as "nothing wrong found".
EXIT_OK, EXIT_FINDINGS, EXIT_UNCHECKED = 0, 1, 3


def exit_status(findings: Sequence[Finding]) -> int:
    statuses = {f.status for f in findings}
    if statuses & {Status.PROBLEM, Status.WARNING}:
        return EXIT_FINDINGS
    return EXIT_UNCHECKED if Status.UNCHECKED in statuses else EXIT_OK


_LABELS = {Status.OK: "ok", Status.PROBLEM: "PROBLEM", Status.WARNING: "warning", Status.UNCHECKED: "?"}


def render(title: str, findings: Sequence[Finding]) -> str:
    lines = [title, ""]
    for finding in findings:
        lines.append(f"  {_LABELS[finding.status]:<8} {finding.what}")
        if finding.why:
            lines.append(f"  {'':<8} why: {finding.why}")
        if finding.fix:
            lines.append(f"  {'':<8} fix: {finding.fix}")
    counts = {status: sum(f.status is status for f in findings) for status in Status}
    summary = (
        f"{counts[Status.PROBLEM]} problems, {counts[Status.WARNING]} warnings, "
        f"{counts[Status.UNCHECKED]} checks not made, {counts[Status.OK]} ok"
    )
    return "\n".join([*lines, "", summary])


def as_json(findings: Sequence[Finding]) -> list[dict[str, str]]:
    return [{**asdict(f), "status": f.status.value} for f in findings]
