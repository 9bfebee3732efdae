"""Errors a user can fix: printed as one line by the command, never as a traceback."""


class ConfigError(ValueError):
    """A bad setting, unknown name or missing file, explained in one line."""
