"""A container forked from the worker zygote finds botocore's data parsed (botocore_models.py): its functions'
clients are made without reading a model file, and only the data is shared between sessions."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

# Run in a process of its own: the suite's conftest shares a loader of its own in the test process.
SCRIPT = textwrap.dedent(
    """
    import json, os, sys
    import nodecycle_sandbox.runner.botocore_warm  # what the zygote preloads
    from nodecycle_sandbox.runner import botocore_models
    import boto3, botocore.loaders

    pid = os.fork()  # a container, forked from the warm zygote
    if pid:
        sys.exit(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
    botocore_models.install()  # what the worker does first
    read = []
    load_file = botocore.loaders.JSONFileLoader.load_file
    botocore.loaders.JSONFileLoader.load_file = lambda self, path: read.append(path) or load_file(self, path)
    a = boto3.session.Session(region_name="eu-west-1", aws_access_key_id="a", aws_secret_access_key="a")
    b = boto3.session.Session(region_name="us-west-2", aws_access_key_id="b", aws_secret_access_key="b")
    clients = {service: (a.client(service), b.client(service)) for service in botocore_models.SERVICES}
    clients["ec2"][0].get_paginator("describe_instances")
    clients["dynamodb"][0].get_paginator("query")
    print(json.dumps({
        "read": read,
        "regions": sorted({c.meta.region_name for pair in clients.values() for c in pair}),
        "keys": sorted({c._request_signer._credentials.access_key for pair in clients.values() for c in pair}),
    }), flush=True)
    os._exit(0)
    """
)


def test_a_forked_container_makes_its_clients_without_parsing_a_model_and_keeps_its_own_settings() -> None:
    # Given the worker zygote's preload, when a container forked from it makes the functions' clients on two sessions
    ran = subprocess.run(
        [sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=60, check=True
    )
    seen = json.loads(ran.stdout)

    # Then no model, ruleset, endpoint or paginator file was read (each session's loader used to parse them all)
    assert seen["read"] == []
    # And each session kept its own region and credentials: only the data is shared
    assert seen["regions"] == ["eu-west-1", "us-west-2"]
    assert seen["keys"] == ["a", "b"]
