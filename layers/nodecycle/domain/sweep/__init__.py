"""The sweeper and its parts (see :mod:`.sweeper`)."""
