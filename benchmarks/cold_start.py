"""Benchmark: the cold import of each function, from the built artifact, against ``import boto3``.

What Lambda's init phase does first is import the handler module: ``app`` from the function's directory,
with the layer's ``python/`` directory on the path, on a read-only file system (nothing can be compiled and
kept). Each figure is the median of several fresh interpreters (``python -I -S``: no site-packages, only the
function's directory and the layer on the path; ``PYTHONDONTWRITEBYTECODE``; Lambda's environment
variables, which powertools and the X-Ray SDK look at), timed inside the interpreter around the import, in
CPU time (what the import costs; on a shared machine the wall time also counts the other processes) and in
wall time (shown). Every function is measured in the same run as its baseline, side by side.

The artifact is ``.aws-sam/build`` (``make build``): the functions' code, and the layer as
``layers/Makefile`` builds it (pinned wheels, the package, every module compiled to unchecked-hash .pyc).
The layer built for Lambda (arm64) cannot be imported on another architecture (its compiled extensions):
elsewhere, the same make target builds it again for this machine (``.aws-sam/bench-host``), the only
difference being the platform of the compiled wheels.

For comparison, the same imports without the .pyc files (``-X pycache_prefix`` pointing at an empty
directory: every module compiled as it is imported, as from the layer before), and the floor set by the
dependencies every function imports: boto3, pydantic's BaseModel, and powertools' Logger, Metrics and
Tracer (which imports the X-Ray SDK and patches botocore: the template's default is Tracing=Active). The
intake and drain functions are measured once more as deployed with Tracing=PassThrough, where no Tracer is
built (``nodecycle/observability.py``).

A model whose schema is built at its first use rather than at import (``defer_build``) makes the import
cheaper only if the first invocation does not need it: otherwise the cost has only moved. So each function is
also measured with its first invocation's own parse work timed with the import, in the same interpreter and
without AWS calls (``_first_parse``): its settings read from the environment, then for intake a lifecycle
hook's SQS record and the same action as an EventBridge event, through the handler's contract functions (and,
on its own, a Spot interruption: the disruption path's first invocation); for eip and drain one work message,
as ``run_work_record`` reads it.
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from benchmarks.report import Result, Row

ROOT = Path(__file__).resolve().parents[1]
BUILD = ROOT / ".aws-sam" / "build"
HOST_BUILD = ROOT / ".aws-sam" / "bench-host"
FUNCTIONS = {
    "intake": "IntakeFunction",
    "eip": "EipFunction",
    "drain": "DrainFunction",
    "sweeper": "SweeperFunction",
}
TARGETS = {"intake": 1.3, "eip": 1.3, "drain": 2.5}  # x import boto3
UNTRACED = ("intake", "drain")  # measured once more as deployed with Tracing=PassThrough (no X-Ray SDK)
BOTO3 = "import boto3"
BOTO3_CASE = "boto3"  # its case: the base of every ratio
# pydantic loads its models' machinery (pydantic.main and the schema builder) only when BaseModel is first
# asked for: "import pydantic" alone cost next to nothing, which put that share in nodecycle's column.
FLOOR = (
    "import boto3; from pydantic import BaseModel; from aws_lambda_powertools import Logger, Metrics, Tracer; "
    'Logger(service="nodecycle"); Metrics(namespace="NodeCycle"); Tracer(patch_modules=("botocore",))'
)
HANDLER = "import app"
ARN = "arn:aws:lambda:eu-west-1:123456789012:function:nodecycle-intake"
# The settings the template gives every function (read at the first invocation, never at import)
SETTINGS_ENV = {
    "NODECYCLE_OWNER_ID": "nodecycle",
    "NODECYCLE_CLUSTER_NAME": "bench",
    "NODECYCLE_MANAGED_GROUPS": "nodes-general",
    "NODECYCLE_RECORD_TABLE": "nodecycle-records",
    "NODECYCLE_DRAIN_QUEUE_URL": "https://sqs.eu-west-1.amazonaws.com/123456789012/nodecycle-drain",
    "NODECYCLE_EIP_QUEUE_URL": "https://sqs.eu-west-1.amazonaws.com/123456789012/nodecycle-eip",
    "NODECYCLE_WAKE_QUEUE_URL": "https://sqs.eu-west-1.amazonaws.com/123456789012/nodecycle-wake",
    "NODECYCLE_EIP_MODE": "pool",
    "NODECYCLE_EIP_POOL_NAME": "bench",
}


# The first invocation each "+parse" case times after the import (see _first_parse)
FIRST_PARSE_ROWS = {
    "intake": "a hook's SQS record and an EventBridge lifecycle action",
    "intake-spot": "an EventBridge Spot interruption",
    "eip": "a work message",
    "drain": "a work message",
}
FIRST_PARSE_CASES = tuple(f"{name}+parse" for name in FIRST_PARSE_ROWS)


def _event(name: str) -> str:
    return (ROOT / "events" / name).read_text()


def _sqs_body(name: str) -> str:
    body: str = json.loads(_event(name))["Records"][0]["body"]
    return body


def _first_parse() -> dict[str, str]:
    """What each function's first invocation parses before its first AWS call (statements run after
    ``import app``, in the same timing). Each checks what it parsed, so that a statement gone stale fails the
    benchmark rather than timing an error."""
    intake = (
        "from nodecycle.contracts.events import Home, from_eventbridge, from_sqs_body\n"
        "from nodecycle.domain.model import LifecycleEvent\n"
        "from nodecycle.wiring.intake import settings\n"
        "settings()\n"
        f"home = Home.of_function({ARN!r})\n"
    )
    work = (
        "from nodecycle.domain.model import parse_record_id\n"
        "from nodecycle.domain.ports.lifecycle import WorkMessage\n"
        "from nodecycle.wiring.{function} import settings\n"
        "settings()\n"
        "message = WorkMessage.model_validate_json({body!r})\n"
        "assert parse_record_id(message.record_id)[2]\n"
    )
    token = json.loads(_event("eventbridge-terminate.json"))["detail"]["LifecycleActionToken"]
    launch = {"record_id": f"i-0a1b2c3d4e5f60718/launch/{token}", "seq": 1, "step": "assign-eip"}
    terminate = {"record_id": f"i-0a1b2c3d4e5f60718/terminate/{token}", "seq": 3, "step": "evict"}
    return {
        "intake": intake
        + f"[hooked] = from_sqs_body({_sqs_body('sqs-hook-terminate.json')!r}, home)\n"
        + f"[direct] = from_eventbridge({json.loads(_event('eventbridge-terminate.json'))!r}, home=home)\n"
        + "assert isinstance(hooked, LifecycleEvent) and isinstance(direct, LifecycleEvent)\n",
        "intake-spot": intake
        + "from nodecycle.domain.model import DisruptionEvent\n"
        + f"[spot] = from_eventbridge({json.loads(_event('eventbridge-spot-interruption.json'))!r}, home=home)\n"
        + "assert isinstance(spot, DisruptionEvent)\n",
        "eip": work.format(function="eip", body=json.dumps(launch)),
        "drain": work.format(function="drain", body=json.dumps(terminate)),
    }


HOST_PLATFORMS = {
    "x86_64": "manylinux2014_x86_64 manylinux_2_28_x86_64 manylinux_2_34_x86_64",
    "aarch64": "manylinux2014_aarch64 manylinux_2_28_aarch64 manylinux_2_34_aarch64",
}


@dataclass(frozen=True)
class Import:
    cpu: float  # seconds, median
    wall: float
    kubernetes: bool  # the Kubernetes client was imported


@dataclass(frozen=True)
class ColdStart:
    runs: int
    layer: Path
    precompiled: dict[str, Import]  # "boto3", "floor", and each function
    source_only: dict[str, Import]  # the same without .pyc files (the cases measured so: see run)


def layer_dir() -> Path:
    """The built layer's ``python/`` for this machine (building it for this machine if it must)."""
    built = BUILD / "NodecycleLayer"
    if not (built / "python").is_dir():
        raise RuntimeError(f"no built layer in {built}: run `make build` first")
    machine = platform.machine().lower().replace("arm64", "aarch64")
    if sys.platform == "linux" and machine == "aarch64":
        return built / "python"  # Lambda's platform: the artifact as it is
    if machine not in HOST_PLATFORMS or sys.platform != "linux":
        raise RuntimeError(f"no manylinux wheels for this machine ({sys.platform} {machine})")
    host = HOST_BUILD / "NodecycleLayer"
    stamp = host / ".built-from"
    source = str((built / "python" / "nodecycle" / "__init__.py").stat().st_mtime_ns)
    if not stamp.exists() or stamp.read_text() != source:
        subprocess.run(
            [
                "make",
                "--no-print-directory",
                "-C",
                str(ROOT / "layers"),
                "build-NodecycleLayer",
                f"ARTIFACTS_DIR={host}",
                f"PYTHON={sys.executable}",
                f"PLATFORMS={HOST_PLATFORMS[machine]}",
            ],
            check=True,
            stdout=subprocess.DEVNULL,
        )
        stamp.write_text(source)
    return host / "python"


def _measure(
    statement: str, function: str, layer: Path, *, no_pyc: Path | None, traced: bool = False
) -> tuple[float, float, bool]:
    code_dir = BUILD / FUNCTIONS[function]
    env = {
        "PATH": "/usr/bin:/bin",
        "PYTHONDONTWRITEBYTECODE": "1",  # /opt and /var/task are read-only on Lambda
        "LAMBDA_TASK_ROOT": str(code_dir),
        "AWS_LAMBDA_FUNCTION_NAME": f"nodecycle-{function}",
        "AWS_LAMBDA_FUNCTION_MEMORY_SIZE": "512",
        "AWS_LAMBDA_FUNCTION_VERSION": "$LATEST",
        "AWS_EXECUTION_ENV": "AWS_Lambda_python3.13",
        "AWS_REGION": "eu-west-1",
        "AWS_DEFAULT_REGION": "eu-west-1",
        "_HANDLER": "app.handler",
        "POWERTOOLS_SERVICE_NAME": "nodecycle",
        "POWERTOOLS_METRICS_NAMESPACE": "NodeCycle",
        # as the template sets it: Tracing=Active (its default) builds powertools' Tracer, which imports the
        # X-Ray SDK and patches botocore; PassThrough builds none (nodecycle/observability.py)
        "POWERTOOLS_TRACE_DISABLED": "false" if traced else "true",
        **SETTINGS_ENV,
    }
    program = (
        "import sys, time\n"
        f"sys.path[0:0] = [{str(code_dir)!r}, {str(layer)!r}]\n"
        "cpu, wall = time.process_time(), time.perf_counter()\n"
        f"{statement}\n"
        "print(time.process_time() - cpu, time.perf_counter() - wall, 'kubernetes' in sys.modules)\n"
    )
    flags = ["-X", f"pycache_prefix={no_pyc}"] if no_pyc is not None else []
    done = subprocess.run(
        # -B as well as PYTHONDONTWRITEBYTECODE, which -I ignores: nothing written, as on Lambda
        [sys.executable, "-I", "-S", "-B", *flags, "-c", program],
        capture_output=True,
        text=True,
        env=env,
        cwd=code_dir,
        check=False,
    )
    if done.returncode:
        raise RuntimeError(f"{statement} ({function}) failed:\n{done.stderr[-2000:]}")
    cpu, wall, kubernetes = done.stdout.split()
    return float(cpu), float(wall), kubernetes == "True"


def run(runs: int, without_pyc: tuple[str, ...] | None = None) -> ColdStart:
    """Each case ``runs`` times with the layer's .pyc files, and without them ``import boto3`` (the ratios' base)
    and the cases of ``without_pyc`` (None: every case). No row is measured without .pyc files, only the details:
    CI's smallest run (--tiny) takes one case, enough for that pass to run, where all twelve cost as much CPU as
    the rest of the benchmark (each compiles every module it imports)."""
    layer = layer_dir()
    cases = (
        {BOTO3_CASE: (BOTO3, "intake", False), "floor": (FLOOR, "intake", True)}
        | {name: (HANDLER, name, True) for name in FUNCTIONS}
        | {f"{name}-xray": (HANDLER, name, False) for name in UNTRACED}
        | {
            f"{name}+parse": (f"{HANDLER}\n{parse}", name.removesuffix("-spot"), True)
            for name, parse in _first_parse().items()
        }
    )
    found: dict[str, dict[str, Import]] = {}
    with tempfile.TemporaryDirectory(prefix="nodecycle-no-pyc-") as empty:
        for label, no_pyc in (("precompiled", None), ("source_only", Path(empty))):
            measured = (
                cases if no_pyc is None or without_pyc is None else _only(cases, (BOTO3_CASE, *without_pyc))
            )
            samples: dict[str, list[tuple[float, float, bool]]] = {name: [] for name in measured}
            for _ in range(runs):  # interleaved: a burst of load on the machine hits every case alike
                for name, (statement, function, traced) in measured.items():
                    samples[name].append(_measure(statement, function, layer, no_pyc=no_pyc, traced=traced))
            found[label] = {
                name: Import(
                    cpu=statistics.median(s[0] for s in taken),
                    wall=statistics.median(s[1] for s in taken),
                    kubernetes=any(s[2] for s in taken),
                )
                for name, taken in samples.items()
            }
    return ColdStart(runs, layer, found["precompiled"], found["source_only"])


def _only[T](cases: dict[str, T], names: tuple[str, ...]) -> dict[str, T]:
    unknown = sorted(set(names) - set(cases))
    if unknown:
        raise ValueError(f"no cold start case named {', '.join(unknown)} (cases: {', '.join(cases)})")
    return {name: case for name, case in cases.items() if name in names}


def result(cold: ColdStart) -> Result:
    boto3 = cold.precompiled["boto3"].cpu
    rows = []
    for name in FUNCTIONS:
        measured = cold.precompiled[name]
        target = TARGETS.get(name)
        rows.append(
            Row(
                f"cold import of {name} vs import boto3 (CPU, built layer)",
                measured.cpu,
                boto3,
                "s",
                f"<= {target:.1f}x" if target else "-",
                None if target is None else measured.cpu <= target * boto3,
            )
        )
    for name, told in FIRST_PARSE_ROWS.items():
        rows.append(
            Row(
                f"  cold import of {name} + its first invocation's parse ({told}) vs import boto3",
                cold.precompiled[f"{name}+parse"].cpu,
                boto3,
                "s",
                "-",
            )
        )
    for name in UNTRACED:
        rows.append(
            Row(
                f"  cold import of {name} with Tracing=PassThrough (no X-Ray) vs import boto3",
                cold.precompiled[f"{name}-xray"].cpu,
                boto3,
                "s",
                "-",
            )
        )
    floor = cold.precompiled["floor"].cpu
    rows.append(Row("  the floor: boto3 + pydantic's BaseModel + powertools (CPU)", floor, boto3, "s", "-"))
    without = [name for name in ("intake", "eip") if not cold.precompiled[name].kubernetes]
    rows.append(
        Row(
            "functions that import no Kubernetes client (intake, eip)",
            len(without),
            2,
            "",
            "= 2",
            len(without) == 2,
        )
    )
    source_boto3 = cold.source_only[BOTO3_CASE].cpu  # (always measured without .pyc: see run)
    details = [
        f"median of {cold.runs} fresh interpreters each; layer {cold.layer.relative_to(ROOT)}; "
        f"CPU time (wall time alongside; the machine may be shared)"
        + ("" if len(cold.source_only) == len(cold.precompiled) else "; without .pyc, the cases named only"),
        "case              precompiled: CPU   wall   x boto3 | without .pyc: CPU   wall   x boto3 | Kubernetes",
    ]
    for name in ("boto3", "floor", *FUNCTIONS, *(f"{n}-xray" for n in UNTRACED), *FIRST_PARSE_CASES):
        pre, src = cold.precompiled[name], cold.source_only.get(name)
        compiled = (
            f"{src.cpu:12.3f} s {src.wall:5.2f} s {src.cpu / source_boto3:6.2f}x"
            if src is not None
            else f"{'not measured':>30s}"
        )
        details.append(
            f"{name:17s} {pre.cpu:12.3f} s {pre.wall:5.2f} s {pre.cpu / boto3:6.2f}x | {compiled} | "
            f"{'imported' if pre.kubernetes else 'not imported'}"
        )
    details.append(
        "import alone, and with the first invocation's parse (+parse: settings from the environment, then "
        + "; ".join(f"{name}: {told}" for name, told in FIRST_PARSE_ROWS.items())
        + "), precompiled CPU:"
    )
    for name in FIRST_PARSE_ROWS:
        alone = cold.precompiled[name.removesuffix("-spot")].cpu
        parsed = cold.precompiled[f"{name}+parse"].cpu
        details.append(
            f"  {name:12s} import {alone:.3f} s ({alone / boto3:.2f}x)   + parse {parsed:.3f} s "
            f"({parsed / boto3:.2f}x)   the parse's own {parsed - alone:+.3f} s"
        )
    return Result("cold start: importing each function's handler", rows, details)


def main() -> None:  # a development aid: python -m benchmarks.cold_start [runs]
    found = result(run(int(sys.argv[1]) if len(sys.argv) > 1 else 5))
    print("\n".join(found.details))
    for row in found.rows:
        print(row)


if __name__ == "__main__":
    os.chdir(ROOT)
    main()
