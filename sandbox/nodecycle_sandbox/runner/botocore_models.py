"""botocore's data (service models, endpoint rules, partitions), parsed once in the worker zygote rather than
once per container.

Each botocore session has a loader of its own that reads and parses the JSON it needs on the session's first
client of a service: about 0.1 CPU-s for EC2's model alone (several MB), 0.16 s for the clients a nodecycle
function makes, in every container the sandbox starts (a profile of the fault campaign: an eighth of the
containers' CPU). A Lambda container pays that once per cold start, and so does a container here: the zygote
(``zygote.WORKER_PRELOAD``) imports this module, which parses the data once into one loader; every container
forked from it starts with that loader's cache (copy-on-write) and `install` makes each new session use it.
Only data is shared: credentials, regions, configuration and clients stay each session's own, and the product
code is the same (it creates its clients as it would in Lambda). A container started cold (no zygote) parses
what it uses itself, into the same one loader.
"""

from __future__ import annotations

import contextlib

import botocore.loaders
import botocore.session
from botocore.exceptions import DataNotFoundError

# The services nodecycle's functions call (their clients' models, endpoint rules and paginators)
SERVICES = ("autoscaling", "dynamodb", "ec2", "eks", "sqs", "sts")
_TYPES = ("service-2", "endpoint-rule-set-1", "paginators-1")

_LOADER = botocore.loaders.create_loader()
_make_loader = botocore.loaders.create_loader


def _shared(search_path_string: str | None = None) -> botocore.loaders.Loader:
    # (a session told of other data paths, AWS_DATA_PATH, gets a loader of its own, as botocore would make)
    return _make_loader(search_path_string) if search_path_string else _LOADER


def install() -> None:
    """New botocore sessions in this process use the one loader (idempotent)."""
    botocore.session.create_loader = _shared


def warm() -> None:
    """Parse what the functions' clients load, into the one loader: a client of each service made on a session
    of its own (the endpoints, partitions and defaults any client reads), and each service's data types."""
    session = botocore.session.Session()
    session.register_component("data_loader", _LOADER)
    for service in SERVICES:
        client = session.create_client(
            service, region_name="us-east-1", aws_access_key_id="warm", aws_secret_access_key="warm"
        )
        for kind in _TYPES:  # (by the version a client asks for: the cache is keyed by it)
            with contextlib.suppress(DataNotFoundError):
                _LOADER.load_service_model(service, kind, client.meta.service_model.api_version)
