"""What the Lambda service hands a handler besides the event: the context object and the environment."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from nodecycle_sandbox.runner.functions import FunctionSpec


@dataclass
class LambdaContext:
    """The attributes of `awslambdaric`'s context that handlers and Powertools read."""

    function_name: str
    function_version: str
    invoked_function_arn: str
    memory_limit_in_mb: int
    aws_request_id: str
    log_group_name: str
    log_stream_name: str
    deadline: float  # epoch seconds

    def get_remaining_time_in_millis(self) -> int:
        return max(0, int((self.deadline - time.time()) * 1000))


def lambda_environment(
    spec: FunctionSpec, *, region: str, sandbox_env: dict[str, str], overrides: dict[str, str]
) -> dict[str, str]:
    """Lambda's variables, the sandbox's (endpoint, credentials), the template's, then explicit overrides."""
    return {
        "AWS_LAMBDA_FUNCTION_NAME": spec.name,
        "AWS_LAMBDA_FUNCTION_VERSION": "$LATEST",
        "AWS_LAMBDA_FUNCTION_MEMORY_SIZE": str(spec.memory_mb),
        "AWS_LAMBDA_LOG_GROUP_NAME": f"/aws/lambda/{spec.name}",
        "AWS_LAMBDA_LOG_STREAM_NAME": f"sandbox/[$LATEST]{spec.logical_id}",
        "AWS_EXECUTION_ENV": "AWS_Lambda_python3.13",
        "AWS_REGION": region,
        "AWS_DEFAULT_REGION": region,
        "LAMBDA_TASK_ROOT": str(spec.code_dir),
        **sandbox_env,
        **spec.environment,
        **overrides,
    }
