"""Ready-made pieces for running nodecycle on the sandbox: where the project is, what to seed, what to watch.

Used by ``nodecycle sandbox`` and ``nodecycle demo``.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nodecycle_sandbox.aws.records import ActionRecord
from nodecycle_sandbox.kube.seed import default_seed, load_seed
from nodecycle_sandbox.sandbox import Sandbox


def project_root(start: Path | None = None) -> Path:
    """The directory holding template.yaml: the working directory or one of its parents, else the checkout
    this package was installed from (an editable install)."""
    here = (start or Path.cwd()).resolve()
    for candidate in (here, *here.parents, Path(__file__).resolve().parents[2]):
        if (candidate / "template.yaml").is_file() and (candidate / "functions").is_dir():
            return candidate
    raise FileNotFoundError("no template.yaml here or above: run this from the nodecycle checkout")


def split_seed(source: Path | None) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """A cluster seed as (extra nodes, everything else). The group's instances bring their own nodes; nodes
    listed in the seed join as well, as nodes no nodecycle group manages."""
    seed = dict(default_seed() if source is None else _read(source))
    nodes = list(seed.pop("nodes", []) or [])
    if source is None:
        nodes = []  # the default seed's nodes stand for a group: the sandbox's group replaces them
    return nodes, seed


def _read(source: Path) -> Mapping[str, Any]:
    load_seed(source)  # validates the whole document, naming what is wrong
    import yaml

    with source.open(encoding="utf-8") as stream:
        loaded: Mapping[str, Any] = yaml.safe_load(stream)
    return loaded


@dataclass(frozen=True)
class ActionEvent:
    """A lifecycle action that just ended, for a running commentary."""

    action: ActionRecord

    def line(self, started: float) -> str:
        action = self.action
        kind = "launch" if action.transition.endswith("LAUNCHING") else "terminate"
        took = (action.finished_at or 0) - action.started_at
        by = f", by {action.completed_by}" if action.completed_by else ""
        return (
            f"{(action.finished_at or 0) - started:7.1f}s  {action.instance_id}  {kind:<9}  "
            f"{action.outcome} {action.result or ''} after {took:.1f}s{by}"
        )


def finished_actions(sandbox: Sandbox, seen: set[str]) -> Iterator[ActionEvent]:
    """Actions that ended since the last call (``seen`` keeps the tokens already reported)."""
    for action in sorted(sandbox.aws.actions(), key=lambda a: a.finished_at or 0):
        if not action.active and action.token not in seen:
            seen.add(action.token)
            yield ActionEvent(action)
