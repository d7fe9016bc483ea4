"""The shapes of the messages nodecycle receives and sends (pydantic models)."""
