"""Warm starts: a container forked from a zygote is what `python -m` would have started, and a layer's own
copy of a library the zygote preloaded is still the one its functions import."""

from __future__ import annotations

import json
import os
import subprocess
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from nodecycle_sandbox.zygote import Zygote

from .conftest import MakeRunner

REPORTER = """
import json, os, sys
print(json.dumps({"name": __name__, "argv": sys.argv[1:], "cwd": os.getcwd(), "path0": sys.path[0],
                  "env": {k: v for k, v in os.environ.items() if k.startswith("ZYGOTE_")},
                  "comm": open("/proc/self/comm").read().strip(),
                  "fds": sorted(int(fd) for fd in os.listdir("/proc/self/fd"))}), flush=True)
print("to stderr", file=sys.stderr, flush=True)
sys.exit(int(os.environ.get("ZYGOTE_EXIT", "0")))
"""


@pytest.fixture(scope="module")
def zygote() -> Iterator[Zygote]:
    warm = Zygote(("json",))
    yield warm
    warm.close()


def test_a_child_gets_exactly_its_environment_directory_arguments_and_descriptors(
    zygote: Zygote, tmp_path: Path
) -> None:
    # Given a module in a directory, and pipes for the child's standard output and error
    (tmp_path / "reporter.py").write_text(REPORTER)
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    os.environ["ZYGOTE_OF_THE_PARENT"] = "must not leak"
    try:
        # When it is started warm, as `python -m reporter a b` with an environment of its own
        child = zygote.start(
            "reporter",
            ["a", "b"],
            env={"ZYGOTE_OWN": "yes"},
            cwd=tmp_path,
            fds={1: out_w, 2: err_w},
            title="fn:reporter",
        )
    finally:
        del os.environ["ZYGOTE_OF_THE_PARENT"]
        os.close(out_w)
        os.close(err_w)

    # Then it ran as __main__ with those, under its title, and holds no descriptor it was not given (0 is the zygote's /dev/null)
    with os.fdopen(out_r) as out, os.fdopen(err_r) as err:
        seen = json.loads(out.readline())
        assert err.read() == "to stderr\n"
    child.wait(timeout=10)
    assert seen["name"] == "__main__"
    assert seen["argv"] == ["a", "b"]
    assert seen["cwd"] == str(tmp_path)
    assert seen["path0"] == str(tmp_path)
    assert seen["env"] == {"ZYGOTE_OWN": "yes"}
    assert seen["comm"] == "fn:reporter"  # its name for whoever reads /proc (the benchmarks' load sampler)
    assert [fd for fd in seen["fds"] if fd > 2] == [3]  # the listing's own descriptor


def test_a_child_can_be_waited_for_and_killed(zygote: Zygote, tmp_path: Path) -> None:
    # Given a child that waits on its standard input
    (tmp_path / "sleeper.py").write_text("import sys\nsys.stdin.read()\n")
    in_r, in_w = os.pipe()
    child = zygote.start("sleeper", [], env={}, cwd=tmp_path, fds={0: in_r})
    os.close(in_r)

    # When it is waited for, it has not exited; when killed, it has
    assert child.poll() is None
    with pytest.raises(subprocess.TimeoutExpired):
        child.wait(timeout=0.2)
    child.kill()
    child.wait(timeout=10)
    assert child.poll() is not None
    os.close(in_w)


LAYERED = """
Resources:
  Lib:
    Type: AWS::Serverless::LayerVersion
    Properties:
      ContentUri: layer/
  Worker:
    Type: AWS::Serverless::Function
    Properties:
      CodeUri: functions/worker/
      Handler: app.handler
      Layers: [!Ref Lib]
"""


def test_a_layer_that_ships_a_preloaded_library_gets_its_own_copy(
    make_runner: MakeRunner, tmp_path: Path
) -> None:
    # Given a layer that ships its own yaml (which the workers' zygote preloads)
    (tmp_path / "layer" / "yaml").mkdir(parents=True)
    (tmp_path / "layer" / "yaml" / "__init__.py").write_text("SHIPPED = True\n")
    handler = textwrap.dedent("""
        import yaml

        def handler(event, context):
            return {"file": yaml.__file__}
    """)

    # When a function with that layer runs in a container
    runner = make_runner(LAYERED, {"worker": handler}, mode="process", root=tmp_path)
    result = runner.invoke("Worker", {})

    # Then it imported the layer's copy
    assert result.ok, result.error_message
    assert result.response["file"] == str(tmp_path / "layer" / "yaml" / "__init__.py")
