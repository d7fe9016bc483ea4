"""AssociateAddress as EC2 answers it, where moto 5 does not.

- An instance (its primary private IP, or a network interface) holds one Elastic IP: associating another one
  with it disassociates the one it had, which stays allocated (the EC2 API reference: "If you associate an
  Elastic IP address with an instance that has an existing Elastic IP address, the existing address is
  disassociated from the instance"). moto keeps both associated, so two concurrent deliveries of one launch
  that each claim a pool address would leave the instance with two, which EC2 never shows.
- EC2 decides each association atomically; moto checks ``AllowReassociation`` and then sets, which two
  request threads can interleave (both "win" the same address). The calls are serialized here.
"""

from __future__ import annotations

import threading
from typing import Any

from moto.ec2.models.elastic_ip_addresses import ElasticAddress, ElasticAddressBackend

_LOCK = threading.Lock()
_MARKER = "_nodecycle_sandbox_associate"


def install() -> None:
    """Idempotent: a second call changes nothing (a second wrapper would wait for its own lock)."""
    if getattr(ElasticAddressBackend, _MARKER, False):
        return
    original = ElasticAddressBackend.associate_address

    def associate_address(self: ElasticAddressBackend, *args: Any, **kwargs: Any) -> ElasticAddress:
        with _LOCK:
            associated = original(self, *args, **kwargs)
            for other in self.addresses:
                if other is not associated and other.eni is not None and other.eni is associated.eni:
                    other.instance = None
                    other.eni = None
                    other.association_id = None
            return associated

    ElasticAddressBackend.associate_address = associate_address  # type: ignore[method-assign]
    setattr(ElasticAddressBackend, _MARKER, True)
