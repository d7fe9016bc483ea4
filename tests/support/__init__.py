"""Helpers shared by the tests: sample events, function loading, fakes, the stack's AWS resources."""
