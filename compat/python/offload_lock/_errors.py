"""The exceptions of offload_lock, and the C API's results mapped to them."""

from __future__ import annotations

from typing import Optional

from . import _native as N


class LockError(Exception):
    """The lock could not be taken. ``path`` names the lock (or GPU slot)."""

    def __init__(self, message: str, path: Optional[str] = None) -> None:
        super().__init__(message)
        self.path = path


class Busy(LockError):
    """Held by someone else, and the caller asked to try once (``wait=0``).
    The message names the holder as the command does: ``busy: PATH is held
    by LABEL (pid N, host H) for 5m12s``."""


class Timeout(LockError, TimeoutError):
    """Still held by someone else when the wait ended; the message names the
    holder, as Busy's does."""


class Cancelled(Exception):
    """A wait abandoned through its cancel pipe (Ctrl-C, task cancellation).
    Internal: never raised to the caller."""


def failure(rc: int, message: str, err: int, path: str) -> BaseException:
    """The exception for a C API result other than OK."""
    if rc == N.BUSY:
        return Busy(message, path)
    if rc == N.TIMED_OUT:
        return Timeout(message, path)
    if rc == N.CANCELLED:
        return Cancelled(message)
    if rc == N.INVALID:
        return ValueError(message)
    if err:
        # OSError(errno, ...) gives the matching subclass (PermissionError,
        # FileNotFoundError, NotADirectoryError ...).
        return OSError(err, message, path)
    return LockError(message, path)
