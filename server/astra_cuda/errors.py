"""User-facing errors. Each carries a message fit to print as is (never a traceback)."""
from __future__ import annotations


class AstraError(Exception):
    """Bad input or an impossible request: the CLI prints it and exits 2."""

    exit_code = 2

    def __init__(self, message: str, *, line: int | None = None, col: int | None = None):
        super().__init__(message)
        self.message = message
        self.line = line  # 0-based, when the error has a place in the user's file
        self.col = col


class SpecError(AstraError):
    """A harness-spec problem at a place inside the spec comment."""


class NoSuchKernel(AstraError):
    pass
