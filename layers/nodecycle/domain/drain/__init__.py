"""Draining a terminating node, and the launch readiness gate: the steps that talk to Kubernetes.

The drain of a terminating node, one module a step. Each step is short and idempotent: a redelivery runs it
again safely.

ACQUIRE_SLOT (find the node, take a budget slot or wait: :mod:`.acquire`) -> CORDON (owner + in-progress
annotations and the cordon in one PATCH: :mod:`.cordon`) -> EVICT (evict, then poll until the pods are gone;
timeout policy; load balancer delay: :mod:`.evict`) -> [RELEASE_EIP] -> COMPLETE -> CLEANUP (clear the
annotations in one PATCH, release the slot, wake the next waiter: :mod:`.cleanup`). An instance gone without a
hook: FORGET_NODE (:mod:`.forget`). What the steps share: :mod:`.common`.
"""
