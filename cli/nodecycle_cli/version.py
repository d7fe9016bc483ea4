"""Which nodecycle the command is, and which one a stack runs (its ``Version`` output: pyproject.toml's version,
which template.yaml publishes): an operator reading a stack with the command of another release reads the
README's upgrade notes, the record and budget formats, against the wrong one."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from nodecycle_cli.deployment import Deployment

# A stack's output naming its release (template.yaml's Outputs)
VERSION_OUTPUT = "Version"


def installed() -> str:
    """The installed package's version (pyproject.toml's); the layer's own when run from a checkout."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("nodecycle")
    except PackageNotFoundError:
        from nodecycle import __version__

        return __version__


def deployed(deployment: Deployment) -> str:
    """The release ``deployment`` says it runs, as shown to an operator; a stack deployed from a template before
    stacks told theirs says none."""
    return (
        deployment.outputs.get(VERSION_OUTPUT)
        or "(unknown: no Version output, deployed from an older template)"
    )


def line(deployment: Deployment) -> str:
    """The stack's release beside the command's."""
    return f"Stack {deployment.name} runs nodecycle {deployed(deployment)} (this command: {installed()})"


def mismatch(deployment: Deployment) -> str | None:
    """A warning when the stack runs another release than the command's (or does not say which); None when the
    same."""
    ours = installed()
    if deployment.outputs.get(VERSION_OUTPUT) == ours:
        return None
    return (
        f"warning: stack {deployment.name} runs nodecycle {deployed(deployment)}, this command is {ours}: read "
        "the README's upgrade notes between the two, and bring them together (sam build && sam deploy from this "
        "release's checkout, or the command of the stack's release)"
    )
