"""The README's install, `sam build && sam deploy --guided`, on a machine whose `python3` is not the Lambda
runtime's version: the layer's build (layers/Makefile, which `sam build` runs with the shell's PATH) finds a
Python 3.13 where the rest of the project does (scripts/find-python), as `make demo` and `make test` do."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_layer_build_finds_the_runtimes_python_when_python3_is_another(tmp_path: Path) -> None:
    # Given a PATH whose first python3 is not Python 3.13 (here one that fails as any other version would)
    shims = tmp_path / "bin"
    shims.mkdir()
    other = shims / "python3"
    other.write_text("#!/bin/sh\necho 'Python 3.11, not the runtime' >&2\nexit 1\n")
    other.chmod(0o755)
    environ = {key: value for key, value in os.environ.items() if key != "PYTHON"}
    environ["PATH"] = f"{shims}{os.pathsep}{environ.get('PATH', '')}"
    make = shutil.which("make")
    assert make is not None
    # When `sam build` runs the layer's target (here in a directory without the requirements, so that pip stops
    # at once, before any download)
    built = subprocess.run(
        [make, "--no-print-directory", "-f", str(ROOT / "layers" / "Makefile"), "build-NodecycleLayer"],
        cwd=tmp_path,
        env={**environ, "ARTIFACTS_DIR": str(tmp_path / "layer")},
        capture_output=True,
        text=True,
        timeout=60,
    )
    # Then the build did not stop at python3: it went on to install the dependencies with a Python 3.13
    assert "not the runtime" not in built.stderr, built.stderr
    installer = built.stdout.split(" -m pip install", 1)[0].split()[-1]
    version = subprocess.run(
        [installer, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert version.stdout.strip() == "3.13"
