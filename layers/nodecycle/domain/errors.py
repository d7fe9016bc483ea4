"""Errors the domain understands. Adapters translate their clients' errors into these."""


class TransientError(Exception):
    """A call failed in a way that may succeed later (throttling, a 5xx, a network error, a conflict).

    The step engine retries the step with backoff instead of failing the message.
    """
