"""What a cold start imports: each function's handler, loaded in a fresh interpreter as Lambda loads it,
brings in none of the heavy modules it does not need. Each of these once crept back in unnoticed and cost
every cold start a measurable share (``python -m benchmarks --only cold``):

- ``kubernetes.client.api.core_v1_api`` (the generated ``CoreV1Api``): about 250 model modules, near 1 s of
  CPU; the adapters call core/v1 through ``adapters/kube/core_v1.py`` instead;
- ``aws_lambda_powertools.utilities.parser``: 0.07-0.1 s, for the EventBridge envelope alone;
- ``aws_xray_sdk``: imported and patched into botocore only when the stack traces (``Tracing=Active``, the
  default), never when it does not (powertools' ``Tracer`` imports it even when disabled).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
HEAVY = ("kubernetes.client.api.core_v1_api", "aws_lambda_powertools.utilities.parser", "aws_xray_sdk")


def _imported(function: str, *, tracing: bool) -> dict[str, object]:
    script = (
        "import json, sys; from tests.support.functions import load_function; "
        f"load_function({function!r}); "
        f"print(json.dumps({{'heavy': sorted({{m.split('.')[0] if m.startswith('aws_xray') else m "
        f"for m in sys.modules}} & set({list(HEAVY)!r})), "
        "'models': len([m for m in sys.modules if m.startswith('kubernetes.client.models.')])}))"
    )
    env = {**os.environ, "POWERTOOLS_TRACE_DISABLED": "false" if tracing else "true"}
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=env, cwd=ROOT, check=True
    )
    found: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return found


@pytest.mark.parametrize("function", ["intake", "eip", "drain", "sweeper"])
def test_a_cold_start_imports_none_of_the_heavy_modules_it_does_not_need(function: str) -> None:
    # When a fresh interpreter loads the function's handler, as deployed with Tracing=PassThrough
    found = _imported(function, tracing=False)

    # Then none of the heavy modules is imported, and at most a handful of the Kubernetes client's models
    assert found["heavy"] == [], f"{function} imported {found['heavy']}"
    models = found["models"]
    assert isinstance(models, int)
    assert models <= 10, f"{function} imported {models} of the Kubernetes client's model modules"


def test_with_tracing_active_the_x_ray_sdk_is_imported_and_botocore_patched() -> None:
    # When the intake function loads as deployed with Tracing=Active (the default)
    found = _imported("intake", tracing=True)

    # Then the X-Ray SDK is there (the check above would see it)
    assert found["heavy"] == ["aws_xray_sdk"]


def _built_models(
    function: str, parse: str = "", under: str = "nodecycle.contracts."
) -> dict[str, list[str]]:
    """The pydantic models of nodecycle's modules ``under`` a prefix whose validator is built, by module, after
    a fresh interpreter loads the function's handler and then runs ``parse`` (its first invocation's reading of
    an event)."""
    script = (
        "import json, sys\n"
        "from pydantic import BaseModel\n"
        "from tests.support.functions import load_function\n"
        f"load_function({function!r})\n"
        f"{parse}\n"
        "built = {\n"
        f"    name.removeprefix({under!r}): sorted(\n"
        "        key for key, value in vars(module).items()\n"
        "        if isinstance(value, type) and issubclass(value, BaseModel) and value is not BaseModel\n"
        "        and value.__module__ == name and value.__pydantic_complete__\n"
        "    )\n"
        f"    for name, module in list(sys.modules.items()) if name.startswith({under!r})\n"
        "}\n"
        "print(json.dumps({module: models for module, models in built.items() if models}))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT, check=True
    )
    found: dict[str, list[str]] = json.loads(done.stdout.strip().splitlines()[-1])
    return found


def test_a_cold_start_of_intake_builds_no_event_models_validator() -> None:
    # When a fresh interpreter loads the intake function's handler
    built = _built_models("intake")

    # Then no event model's validator is built yet: each is built at the first event of its kind, so that an
    # invocation that reads lifecycle actions never builds the disruptions' (python -m benchmarks --only cold)
    assert built == {}


def test_reading_a_hooks_notification_builds_its_model_and_none_of_the_disruptions() -> None:
    # When the first invocation reads a hook's notification from the intake queue
    body = json.loads((ROOT / "events" / "sqs-hook-terminate.json").read_text())["Records"][0]["body"]
    built = _built_models(
        "intake", f"from nodecycle.contracts.events import from_sqs_body\nfrom_sqs_body({body!r})"
    )

    # Then the hook notification's model is built, and neither the disruptions' nor the EventBridge ones
    assert built == {"lifecycle_events": ["HookNotification"]}


@pytest.mark.parametrize("function", ["intake", "eip"])
def test_a_cold_start_creates_only_its_own_functions_settings(function: str) -> None:
    # When a fresh interpreter loads the handler of a function that does not act on the cluster
    script = (
        "import json, sys\n"
        "from tests.support.functions import load_function\n"
        f"load_function({function!r})\n"
        "from nodecycle.settings import _Section\n"
        "seen, todo = set(), [_Section]\n"
        "while todo:\n"
        "    cls = todo.pop()\n"
        "    seen.add(cls.__name__)\n"
        "    todo.extend(cls.__subclasses__())\n"
        "print(json.dumps({'classes': sorted(seen), 'sweep': sorted(m for m in sys.modules\n"
        "    if m.startswith('nodecycle.domain.sweep'))}))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT, check=True
    )
    found = json.loads(done.stdout.strip().splitlines()[-1])

    # Then none of the drain's, the budget's or the sweeper's settings classes is created (each pydantic class
    # costs its creation, validator deferred or not), nor the sweeper's steps imported
    assert not set(found["classes"]) & {
        "Drain",
        "Budget",
        "Sweep",
        "DrainSettings",
        "SweeperSettings",
        "Settings",
    }
    assert found["sweep"] == []


@pytest.mark.parametrize("function", ["intake", "eip"])
def test_a_cold_start_builds_none_of_the_domain_models_its_first_invocation_does_not_read(
    function: str,
) -> None:
    # When a fresh interpreter loads the handler of a function that does not act on the cluster
    built = _built_models(function, under="nodecycle.domain.")

    # Then the cluster's models (the drain's and the sweeper's), the budget's limit and the disruption without
    # a hook (intake's, at the first disruption taken in) are not built yet; the lifecycle's are
    names = {name for models in built.values() for name in models}
    assert not names & {"NodeInfo", "PodInfo", "Quantity", "DisruptionEvent"}
    assert "LifecycleRecord" in names


def test_a_cold_start_of_intake_imports_neither_the_step_engine_nor_its_steps() -> None:
    # When a fresh interpreter loads the intake function's handler (it sends each new lifecycle's first message,
    # domain/dispatch.py, and never runs a step)
    script = (
        "import json, sys\n"
        "from tests.support.functions import load_function\n"
        "load_function('intake')\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.startswith('nodecycle.'))))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT, check=True
    )
    imported = set(json.loads(done.stdout.strip().splitlines()[-1]))

    # Then neither the engine nor what only its steps use is imported: the completion, the addresses' lines and
    # wake-ups, the addresses' and the cluster's ports (about 0.08x an import boto3: python -m benchmarks --only
    # cold), while the dispatcher is
    assert not imported & {
        "nodecycle.domain.engine",
        "nodecycle.domain.completion",
        "nodecycle.domain.eip",
        "nodecycle.domain.ports.addresses",
        "nodecycle.domain.ports.cluster",
        "nodecycle.wiring.engines",
    }
    assert "nodecycle.domain.dispatch" in imported
