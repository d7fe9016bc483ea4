"""Make the Kubernetes client's package ``__init__`` lazy in the built layer (layers/Makefile runs this).

``kubernetes/__init__.py`` imports every subpackage eagerly: ``config`` (which imports requests,
requests-oauthlib, oauthlib, PyYAML and google-auth for kubeconfig files), ``dynamic``, ``watch``,
``stream``, ``leaderelection`` and ``informer``. nodecycle uses ``kubernetes.client`` alone (it builds its
own Configuration from an EKS token), and a submodule's import runs its package's ``__init__`` first, so
every cold start of the drain and sweeper functions paid about a quarter of the drain's import for code it
never calls (``python -m benchmarks --only cold``). The rewritten ``__init__`` keeps the same names, loaded
on first access (PEP 562), so ``import kubernetes; kubernetes.config.load_kube_config(...)`` works as before.

The rewrite refuses an ``__init__`` it does not recognise (anything but the eager imports, comments and
``__dunder__`` assignments), so a client upgrade that changes the file stops the build instead of shipping
a package with something missing.

Usage: python lazy_kubernetes_init.py LAYER/kubernetes/__init__.py
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

EAGER = re.compile(r"^from \. import (\w+)[ \t]*$", re.MULTILINE)
KEPT = re.compile(r"^(#.*|__\w+__ = .*|)$")  # comments, __project__/__version__, blank lines
MARK = "# Rewritten by nodecycle's layer build"
LAZY = """
# Rewritten by nodecycle's layer build (scripts/lazy_kubernetes_init.py): these subpackages were imported
# here eagerly; each is now imported on its first access as an attribute of this package (PEP 562).
import importlib as _importlib

_SUBPACKAGES = {names!r}


def __getattr__(name):
    if name in _SUBPACKAGES:
        return _importlib.import_module("." + name, __name__)
    raise AttributeError(f"module {{__name__!r}} has no attribute {{name!r}}")


def __dir__():
    return sorted({{*globals(), *_SUBPACKAGES}})
"""


def lazy(text: str) -> str:
    """The same ``__init__`` with its eager subpackage imports made lazy (as it is when made so already: a build
    into a directory built before, where pip keeps what is there); ValueError if it is not one."""
    if MARK in text:
        return text
    names = tuple(EAGER.findall(text))
    if "client" not in names:
        raise ValueError("no `from . import client` line: not the kubernetes __init__ this rewrite knows")
    rest = EAGER.sub("", text)
    unknown = [line for line in rest.splitlines() if not KEPT.match(line.strip())]
    if unknown:
        raise ValueError(f"lines this rewrite does not know, check them by hand: {unknown[:3]}")
    return rest.rstrip() + "\n" + LAZY.format(names=names)


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        sys.stderr.write("usage: python lazy_kubernetes_init.py LAYER/kubernetes/__init__.py\n")
        return 2
    path = Path(argv[1])
    try:
        path.write_text(lazy(path.read_text()))
    except ValueError as refused:
        sys.stderr.write(f"{path}: {refused}\n")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
