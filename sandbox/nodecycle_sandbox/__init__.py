"""Local sandbox for nodecycle: an in-memory Kubernetes API server, AWS fakes and event-source runners."""

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from nodecycle_sandbox.sandbox import Sandbox, SandboxOptions

__all__ = ["Sandbox", "SandboxOptions"]


def __getattr__(name: str) -> Any:
    # Lazy: worker processes import this package too and must not pay for moto, boto3 and the servers.
    if name in __all__:
        from nodecycle_sandbox import sandbox

        return getattr(sandbox, name)
    raise AttributeError(name)
