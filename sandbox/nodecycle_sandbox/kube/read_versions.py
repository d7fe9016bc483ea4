"""Which state a read may be served from: the ``resourceVersion`` and ``resourceVersionMatch`` of a get or a
list, checked and answered as kube-apiserver does (the sandbox keeps no history: every read sees the
latest state, which is what "any" and "not older than" allow; but a test may hold a resource's watch cache
behind, and the reads the cache serves then see it as it was: see watch_cache.py).

- unset: the latest state (a consistent read), with ``limit`` and ``continue`` honoured;
- ``"0"``: any state, from the watch cache: kube-apiserver then ignores ``limit`` and sends every object in
  one response, without a ``continue`` token;
- a version not newer than the latest: at least that new: from the watch cache for a get, and for a list
  without a limit (the cacher's shouldDelegateList: a list with a limit, or ``Exact``, goes to etcd); so the
  latest, or the state a held cache lags at (a version it has not reached: 504, as below);
- newer than the latest: 504, "Too large resource version";
- with ``resourceVersionMatch=Exact``: only the latest version can be served (410 for an older one);
- with ``continue``: 400, the token carries its own version.
"""

from __future__ import annotations

from dataclasses import dataclass

from nodecycle_sandbox.kube import errors

ANY = "0"
_MATCHES = ("", "NotOlderThan", "Exact")


@dataclass(frozen=True)
class ReadVersion:
    resource_version: str = ""
    match: str = ""  # resourceVersionMatch

    def from_cache(self, *, limit: int = 0) -> bool:
        """Served from the watch cache (where a list ignores ``limit``), as kube-apiserver's cacher decides: any
        version named, but for a list with a limit (unless ``"0"``) and an ``Exact`` one; a get, ``limit`` 0. (A
        continued list names none.)"""
        if not self.resource_version or self.match == "Exact":
            return False
        return limit <= 0 or self.resource_version == ANY

    def check_cached(self, cached: int) -> None:
        """Refuse a read from a watch cache at revision ``cached`` of a version it has not reached: kube-apiserver
        waits 3 s for its cache to catch up, then answers this (a held cache never does: at once)."""
        version = self.resource_version
        if version and version != ANY and int(version) > cached:
            raise errors.ApiError(
                504, "Timeout", f"Timeout: Too large resource version: {version}, current: {cached}"
            )

    def check(self, latest: int, *, continuing: bool = False) -> None:
        """Refuse what kube-apiserver refuses; ``latest`` is the store's current revision."""
        version, match = self.resource_version, self.match
        if match not in _MATCHES:
            raise errors.bad_request(f'unsupported resourceVersionMatch "{match}"')
        if match and not version:
            raise errors.bad_request("resourceVersionMatch is forbidden unless resourceVersion is provided")
        if continuing and version:
            raise errors.bad_request("specifying resource version is not allowed when using continue")
        if not version:
            return
        if not version.isdigit():
            raise errors.bad_request(f'invalid resource version "{version}"')
        wanted = int(version)
        if match == "Exact" and wanted == 0:
            raise errors.bad_request('resourceVersionMatch "Exact" is forbidden for resourceVersion "0"')
        if wanted > latest:
            raise errors.ApiError(
                504, "Timeout", f"Timeout: Too large resource version: {wanted}, current: {latest}"
            )
        if match == "Exact" and wanted != latest:
            raise errors.ApiError(
                410,
                "Expired",
                f"The resourceVersion for the provided list is too old: {wanted} (latest {latest})",
            )


LATEST = ReadVersion()  # no version named: a consistent read of the latest state
