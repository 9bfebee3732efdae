"""Errors a user can act on: printed as one line by the command, never as a traceback."""


class ConfigError(ValueError):
    """A bad setting, unknown name or missing file, explained in one line (exit status 2)."""


class Fault(RuntimeError):
    """Something outside the config went wrong (the tracking server does not answer, a loss became
    NaN), explained in one line (exit status 1)."""
