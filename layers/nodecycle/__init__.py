"""nodecycle: EC2 Auto Scaling lifecycle hooks for Kubernetes nodes and Elastic IP fleets."""

__version__ = "0.1.0"  # as pyproject.toml says (tests/integration/kube/test_kube_field_manager.py checks)
