"""Imported by the worker zygote only (``zygote.WORKER_PRELOAD``): botocore's data parsed once for every container
forked from it (botocore_models.py). A container started cold does not import this: it parses what it uses."""

from __future__ import annotations

from nodecycle_sandbox.runner import botocore_models

botocore_models.warm()  # (on import: the zygote imports what it preloads)
