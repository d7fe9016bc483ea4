"""Elastic IPs on the network interfaces another AWS service manages, as EC2 answers for them, where moto 5 does not.

- A NAT gateway's network interface is requester-managed: EC2 created it in the VPC for the NAT gateway
  (``RequesterManaged`` true, ``InterfaceType`` ``nat_gateway``, ``Status`` ``in-use``: the EC2 User Guide,
  "Requester-managed network interfaces": "a network interface that an AWS service creates in your VPC on your
  behalf ... such as ... a NAT gateway"). moto shows it as any interface of the account's: not requester-managed,
  of type ``interface``, ``available`` as if it were attached to nothing.
- An Elastic IP on a requester-managed interface is that service's to associate and disassociate (the same guide:
  one cannot "associate or disassociate Elastic IP addresses" on it; the NAT gateway's own calls are
  DisassociateNatGatewayAddress and DeleteNatGateway). EC2 answers DisassociateAddress for it with ``AuthFailure``
  (the Terraform AWS provider's aws_eip documentation, hashicorp/terraform-provider-aws#4675: an address of a load
  balancer or NAT gateway managed by hand "otherwise you will see AuthFailure errors"); a ReleaseAddress of it is
  refused as in use. moto disassociated it, leaving the NAT gateway without its address, so a caller that pulled an
  address off another service's interface could not be seen doing it.
"""

from __future__ import annotations

from typing import Any

from moto.ec2.exceptions import EC2ClientError
from moto.ec2.models.elastic_ip_addresses import ElasticAddressBackend
from moto.ec2.models.nat_gateways import NatGateway

_MARKER = "_nodecycle_sandbox_managed_interfaces"


def install() -> None:
    """Idempotent: a second call changes nothing."""
    if getattr(ElasticAddressBackend, _MARKER, False):
        return
    original_nat_gateway = NatGateway.__init__
    original_disassociate = ElasticAddressBackend.disassociate_address

    def nat_gateway(self: NatGateway, *args: Any, **kwargs: Any) -> None:
        original_nat_gateway(self, *args, **kwargs)
        manage(self._eni, "nat_gateway")

    def disassociate_address(
        self: ElasticAddressBackend, address: str | None = None, association_id: str | None = None
    ) -> None:
        found = (
            self.address_by_ip([address]) if address else self.address_by_association([association_id or ""])
        )
        if getattr(found[0].eni, "requester_managed", False):
            raise EC2ClientError(
                "AuthFailure", "You do not have permission to access the specified resource."
            )
        original_disassociate(self, address=address, association_id=association_id)

    NatGateway.__init__ = nat_gateway  # type: ignore[method-assign]
    ElasticAddressBackend.disassociate_address = disassociate_address  # type: ignore[method-assign]
    setattr(ElasticAddressBackend, _MARKER, True)


def manage(interface: Any, interface_type: str) -> None:
    """The interface is another AWS service's from now on (a NAT gateway's, a load balancer's...), as EC2 shows one."""
    interface.requester_managed = True
    interface.interface_type = interface_type
    interface.status = "in-use"
