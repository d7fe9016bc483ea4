"""`sam deploy` of a changed stack while it works, on the sandbox: CloudFormation updates the functions'
environment from the new parameters; the invocations in flight finish on the containers they run in (the old
configuration), every later one starts a new container (the new configuration), and no old container is used
again. The queues, the table and the budget ConfigMap stay with what they hold.

The roles' policies are updated with the functions (IAM's side). (The runner deploys a stack once; this changes
one started in place, as Lambda's UpdateFunctionConfiguration and IAM's PutRolePolicy do. A function's timeout,
reserved concurrency and mappings, the rules and the queues' attributes stay as they were.)"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from nodecycle_sandbox import Sandbox
from nodecycle_sandbox.runner.cfn_yaml import load_template
from nodecycle_sandbox.runner.context import lambda_environment
from nodecycle_sandbox.runner.functions import read_functions
from nodecycle_sandbox.runner.intrinsics import Intrinsics, check_parameters, check_rules
from nodecycle_sandbox.runner.invokers import ProcessInvoker


@contextmanager
def redeployable(sandbox: Sandbox) -> Iterator[list[Any]]:
    """The containers that redeploys retire, stopped when the test ends (the sandbox's stop knows only the
    current ones)."""
    retired: list[Any] = []
    try:
        yield retired
    finally:
        for pool in retired:
            pool.close()


def redeploy(sandbox: Sandbox, parameters: Mapping[str, str], retired: list[Any]) -> dict[str, str]:
    """Deploy the sandbox's stack again with ``parameters`` changed: each function's environment as the
    template resolves it now. Returns the parameters deployed."""
    runner = sandbox.runner
    template = load_template(runner.template_path)
    values = {**runner._parameters, **parameters}
    # (CloudFormation refuses a change that breaks a constraint or a rule before it updates anything)
    check_parameters(template, values, min_values=runner._min_values)
    check_rules(template, values)
    resources = runner._resources
    assert resources is not None
    intrinsics = Intrinsics(
        template,
        resources=resources,
        stack_name=runner.stack_name,
        region=runner.region,
        account=runner.account,
        parameters=values,
        min_values=runner._min_values,
    )
    specs = read_functions(
        template,
        root=runner.root,
        intrinsics=intrinsics,
        resources=resources,
        region=runner.region,
        account=runner.account,
    )
    for index, spec in enumerate(specs):
        # (in place: the invoker's pools read these mappings when they start a container)
        environment = runner.environments[spec.logical_id]
        fresh = lambda_environment(
            spec,
            region=runner.region,
            sandbox_env=runner._sandbox_env(index, spec),
            overrides=runner._overrides,
        )
        environment.clear()
        environment.update(fresh)
    runner._parameters = values
    # CloudFormation updates the roles' policies in the same deployment (their statements name the managed
    # groups, the pool, ...): each function's key acts as its role as the new parameters resolve it
    resources.intrinsics = intrinsics
    if runner._identities is not None:
        runner._register_identities(template, resources)
    invoker = runner._invoker
    assert isinstance(invoker, ProcessInvoker), "a redeploy needs the runner's containers (process mode)"
    # The old containers finish what they run and are never used again: new invocations get new pools.
    with invoker._lock:
        retired.extend(invoker._pools.values())
        invoker._pools.clear()
    for pool in retired:
        pool.close()  # (its idle containers now; a busy one goes idle when its invocation ends, closed at the end)
    return values
