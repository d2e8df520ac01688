"""The one error the MLMD inspection commands report: a user-facing line, exit code 2."""


class InspectError(RuntimeError):
    """A one-line, user-facing error (bad store, unknown run or artifact)."""
