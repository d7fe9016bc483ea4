"""The layer's kubernetes package, its ``__init__`` made lazy by the build (scripts/lazy_kubernetes_init.py):
the client alone loads without the kubeconfig machinery, every subpackage is still there on first access, and
an ``__init__`` the rewrite does not recognise stops the build with the file left as it was."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _build_script() -> ModuleType:
    """scripts/lazy_kubernetes_init.py, as the layer's Makefile runs it (a script, not a package module)."""
    spec = importlib.util.spec_from_file_location(
        "lazy_kubernetes_init", ROOT / "scripts" / "lazy_kubernetes_init.py"
    )
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


SCRIPT = _build_script()
lazy, main = SCRIPT.lazy, SCRIPT.main
PINNED_INIT = Path(str(importlib.util.find_spec("kubernetes").origin))  # type: ignore[union-attr]

# Loads the pinned client with its __init__ rewritten, imports what the adapters import, and reports which of
# the eagerly imported subpackages came in, then whether each is still reachable as an attribute.
PROBE = """
import importlib.util, json, sys
spec = importlib.util.find_spec("kubernetes")
module = importlib.util.module_from_spec(spec)
sys.modules["kubernetes"] = module
exec(compile(sys.stdin.read(), spec.origin, "exec"), module.__dict__)
from kubernetes.client import ApiClient, Configuration, V1ConfigMap
from kubernetes.client.exceptions import ApiException
eager = sorted(m for m in sys.modules if m.split(".")[:2] in (["kubernetes", n] for n in
    ("config", "dynamic", "watch", "stream", "leaderelection", "informer")) or m.split(".")[0] == "requests")
import kubernetes
reachable = {n: hasattr(getattr(kubernetes, n), "__name__") for n in
    ("config", "dynamic", "watch", "stream", "utils", "leaderelection", "informer")}
print(json.dumps({"eager": eager, "reachable": reachable, "loader": callable(kubernetes.config.load_kube_config)}))
"""


def test_the_client_alone_loads_without_the_kubeconfig_machinery_and_every_subpackage_stays_reachable() -> (
    None
):
    # Given the pinned client's __init__ as the layer's build rewrites it
    rewritten = lazy(PINNED_INIT.read_text())

    # When a fresh interpreter imports what nodecycle's adapters import, then asks for each subpackage
    done = subprocess.run(
        [sys.executable, "-c", PROBE], input=rewritten, capture_output=True, text=True, check=True, cwd=ROOT
    )
    found = json.loads(done.stdout)

    # Then none of the eagerly imported subpackages (nor requests, which kubeconfig loading brings) came in
    assert found["eager"] == []
    # And each is there on first access, kubeconfig loading included
    assert all(found["reachable"].values()), found["reachable"]
    assert found["loader"] is True


def test_the_pinned_clients_init_keeps_its_version_and_project() -> None:
    rewritten = lazy(PINNED_INIT.read_text())

    namespace: dict[str, object] = {}
    exec(compile(rewritten, "kubernetes/__init__.py", "exec"), namespace)

    import kubernetes

    assert namespace["__version__"] == kubernetes.__version__
    assert namespace["__project__"] == "kubernetes"


@pytest.mark.parametrize(
    "changed",
    [
        "from . import client\nfrom . import config\nconfiguration = client.Configuration()\n",  # a statement
        "__version__ = '99'\nfrom .config import load_config\n",  # no eager client import
    ],
)
def test_an_init_the_rewrite_does_not_recognise_stops_the_build_and_is_left_as_it_was(
    tmp_path: Path, changed: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given a kubernetes __init__ changed by an upgrade in a way the rewrite does not know
    init = tmp_path / "__init__.py"
    init.write_text(changed)

    # When the build runs the rewrite on it
    status = main(["lazy_kubernetes_init.py", str(init)])

    # Then it fails naming the file, and the file is as it was
    assert status == 1
    assert str(init) in capsys.readouterr().err
    assert init.read_text() == changed


def test_a_build_again_into_the_same_directory_leaves_the_rewritten_init_as_it_is(tmp_path: Path) -> None:
    # Given a layer directory built before (pip install --target keeps what is there: the __init__ already lazy)
    init = tmp_path / "__init__.py"
    init.write_text(lazy(PINNED_INIT.read_text()))
    built = init.read_text()

    # When the build runs the rewrite again
    status = main(["lazy_kubernetes_init.py", str(init)])

    # Then it succeeds and the file is the same
    assert status == 0
    assert init.read_text() == built
