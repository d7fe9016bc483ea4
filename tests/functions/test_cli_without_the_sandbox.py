"""The ``nodecycle`` command from a plain install (no ``sandbox`` extra): its help and the operator commands'
help work without moto and the sandbox's other libraries, and a sandbox command says what to install.

A fresh virtual environment per run would take minutes; instead each check runs in a fresh interpreter in
which importing moto, werkzeug, cryptography or matplotlib fails as it does when they are not installed.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

# What only the extra installs (the nodecycle_sandbox package itself comes with every install)...
NOT_INSTALLED = ("moto", "werkzeug", "cryptography", "matplotlib")
# ...and what the operator commands must not even import.
NOT_IMPORTED = (*NOT_INSTALLED, "nodecycle_sandbox")

BLOCKER = f"""
import importlib.abc, sys

class NotInstalled(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {NOT_INSTALLED!r}:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
        return None

sys.meta_path.insert(0, NotInstalled())
from nodecycle_cli.main import main
try:
    status = main(sys.argv[1:])
except SystemExit as exit:
    status = exit.code
loaded = sorted({{m.split(".")[0] for m in sys.modules}} & set({NOT_IMPORTED!r}))
print("LOADED", loaded, file=sys.stderr)
sys.exit(status)
"""


def nodecycle(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", BLOCKER, *argv], capture_output=True, text=True, timeout=120, check=False
    )


@pytest.mark.parametrize(
    "argv",
    [
        ("--help",),
        ("status", "--help"),
        ("budget", "show", "--help"),
        ("budget", "release", "--help"),
        ("doctor", "--help"),
    ],
)
def test_help_works_without_the_sandbox_libraries(argv: tuple[str, ...]) -> None:
    result = nodecycle(*argv)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("usage: nodecycle")
    assert "LOADED []" in result.stderr


def test_a_sandbox_command_without_the_extra_says_what_to_install() -> None:
    result = nodecycle("sandbox", "--help")
    assert result.returncode != 0
    assert result.stderr.splitlines()[0] == (
        "nodecycle sandbox needs the Python package 'moto', which is not installed: pip install 'nodecycle[sandbox]'"
    )
    assert "Traceback" not in result.stderr


def test_status_without_credentials_is_one_line(tmp_path: object) -> None:
    result = subprocess.run(
        [sys.executable, "-c", BLOCKER, "status", "--stack", "nodecycle", "--region", "eu-west-1"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "AWS_EC2_METADATA_DISABLED": "true"},
    )
    assert result.returncode == 2
    assert result.stderr.splitlines()[0].startswith("nodecycle status: no AWS credentials found")
    assert "Traceback" not in result.stderr


def test_budget_show_without_a_kubeconfig_is_one_line(tmp_path: object) -> None:
    result = subprocess.run(
        [sys.executable, "-c", BLOCKER, "budget", "show"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
    )
    assert result.returncode == 2
    assert result.stderr.splitlines()[0] == (
        "nodecycle budget: no usable kubeconfig (Invalid kube-config file. No configuration found.): set "
        "KUBECONFIG or pass --kubeconfig (for EKS: aws eks update-kubeconfig --name CLUSTER)"
    )
