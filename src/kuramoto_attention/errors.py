"""The user-facing error every layer of the package raises for a configuration mistake."""


class ConfigError(ValueError):
    """A user-facing configuration mistake (reported as one line by the CLI)."""
