"""Ctrl-C while a lock is being taken.

Between the moment the C library has taken the lock and the moment the
lock is bound to its Handle (and, for ``with``, to the block that
releases it), a KeyboardInterrupt must not land: the lock would stay held
for the life of the process, out of everyone's reach. A Guard defers
SIGINT over that stretch on the main thread: its handler only records the
signal (Python's C-level handler still writes to the wakeup descriptor, so
a wait in the library is still cancelled at once), and the original
handler runs at a point where nothing is half-taken:

- while waiting (the library returned "cancelled": nothing is held), by
  run_pending(), so Ctrl-C ends a wait as before;
- after the binding, by the code that armed the guard, which releases the
  lock first when the handler raises.

Other threads are never interrupted by signals, and other signals'
handlers are left alone.
"""

from __future__ import annotations

import signal
import threading
from types import FrameType
from typing import Any, List, Optional

_local = threading.local()


class Guard:
    """SIGINT deferred on the main thread between arm() and disarm()."""

    __slots__ = ("armed", "pending", "_old", "_frame")

    def __init__(self) -> None:
        self.armed = False
        self.pending = False
        self._old: Any = None
        self._frame: Optional[FrameType] = None

    def _deferred(self, signum: int, frame: Optional[FrameType]) -> None:
        self.pending = True
        self._frame = frame

    def arm(self) -> None:
        """Defers SIGINT from now on (the main thread only; a no-op
        elsewhere, where no signal handler runs, and when SIGINT has no
        Python handler)."""
        if self.armed or threading.current_thread() is not threading.main_thread():
            return
        try:
            old = signal.getsignal(signal.SIGINT)
            if not callable(old):
                return  # ignored or default: nothing Python would raise
            signal.signal(signal.SIGINT, self._deferred)
        except ValueError:  # not the main interpreter
            return
        self._old = old
        self.armed = True

    def disarm(self) -> bool:
        """Puts the original handler back; True when a SIGINT came while
        armed (then call replay())."""
        if self.armed:
            signal.signal(signal.SIGINT, self._old)
            self.armed = False
        return self.pending

    def replay(self) -> None:
        """Runs the original handler for the SIGINT that came while armed:
        Python's default raises KeyboardInterrupt here."""
        if not self.pending:
            return
        self.pending = False
        frame, self._frame = self._frame, None
        if callable(self._old):
            self._old(signal.SIGINT, frame)

    def run_pending(self) -> None:
        """For a wait that a signal cancelled, holding nothing: runs the
        original handler now (raising KeyboardInterrupt if it does) and
        defers again if it did not raise."""
        if not self.pending:
            return
        self.disarm()
        self.replay()
        self.arm()


def current() -> Optional[Guard]:
    """The guard of the acquisition running on this thread, if any."""
    stack: Optional[List[Guard]] = getattr(_local, "stack", None)
    return stack[-1] if stack else None


def push(g: Guard) -> None:
    stack = getattr(_local, "stack", None)
    if stack is None:
        stack = _local.stack = []
    stack.append(g)


def pop(g: Guard) -> None:
    stack = getattr(_local, "stack", None)
    if stack and stack[-1] is g:
        stack.pop()
