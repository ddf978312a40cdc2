"""The CLI's one error type."""


class CLIError(Exception):
    """Bad user input: ``main`` prints it as one line (no traceback) and exits with status 2."""
