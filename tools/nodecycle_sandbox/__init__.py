"""Local sandbox for nodecycle: an in-memory Kubernetes API server, AWS fakes and event-source runners."""
