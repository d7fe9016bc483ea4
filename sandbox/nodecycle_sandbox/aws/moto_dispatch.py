"""Two answers moto works out at every request, worked out once: the sandbox's AWS server spends its time on
nodecycle's calls rather than on moto looking itself up.

- The backend of a request's host: moto's server lists its own package directory (an ``os.listdir`` and an
  ``os.stat`` of each of its ~150 entries, ``moto.backends.list_of_moto_modules``) for every request, under the lock
  every request takes (``DomainDispatcherApplication.get_application``), so requests queue behind the listing.
- The action methods of a response class: ``BaseResponse.call_action`` lists every function of the class
  (``inspect.getmembers``, ``moto.core.utils.method_names_from_class``) for every request.

Neither answer changes while a server runs: moto's package directories are what was installed, and the response
classes are patched once, by ``install``, before any request is served (so a class is looked at only once it is
patched). On a lifecycle test's server py-spy found the two at about a sixth of the server's busy time.
"""

from __future__ import annotations

import functools

import moto.backends
import moto.core.responses

_MARKER = "_nodecycle_sandbox_dispatch_cached"


def install() -> None:
    """Idempotent: a second call changes nothing."""
    if getattr(moto.backends, _MARKER, False):
        return
    modules = tuple(moto.backends.list_of_moto_modules())
    moto.backends.list_of_moto_modules = lambda: modules
    moto.core.responses.method_names_from_class = functools.cache(moto.core.responses.method_names_from_class)
    setattr(moto.backends, _MARKER, True)
