"""The command's waiting line on stderr, and what on_progress receives.

On a terminal: one line rewritten every second and cleared at the end;
elsewhere: a line when the holder changes and a reminder every minute. The
words are the library's (describe_wait), so the line reads as the
command's: ``offload-lock: waiting 12s for render (pid 4534), held for
5m12s; #2 in line, ETA ~20m``."""

from __future__ import annotations

import os
import sys
from typing import Any, Dict, List, Optional

from ._words import describe_duration


def _printable(s: str) -> str:
    # Labels are the holders' own words: show control characters escaped,
    # so the line stays one line and the terminal shows what is there.
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in s)


class WaitLine:
    """One wait's line on stderr."""

    def __init__(self, tty: bool) -> None:
        self.tty = tty
        self.shown = False

    def __call__(self, waited_ms: int, changed: bool, what: str) -> None:
        try:
            what = _printable(what)
            if self.tty:
                line = f"offload-lock: waiting {describe_duration(waited_ms)} for {what}"
                try:
                    width = os.get_terminal_size(sys.stderr.fileno()).columns
                except (OSError, ValueError):
                    width = 0
                if width > 1 and len(line) >= width:
                    line = line[: width - 1]
                sys.stderr.write("\r\x1b[K" + line)
                self.shown = True
            elif changed:
                sys.stderr.write(f"offload-lock: waiting for {what}\n")
            else:
                sys.stderr.write(f"offload-lock: still waiting for {what}; waited {describe_duration(waited_ms)}\n")
            sys.stderr.flush()
        except Exception:
            pass

    def end(self) -> None:
        if self.shown:
            try:
                sys.stderr.write("\r\x1b[K")
                sys.stderr.flush()
            except Exception:
                pass
            self.shown = False


class WaitProgress:
    """What on_progress receives while a lock waits for another process:
    ``waited`` (seconds), ``changed`` (a holder differs from the previous
    report; True for the first), ``holders`` (the lock, or each GPU slot
    waited for, as dictionaries with the keys of inspect()'s slots, less
    gpu, device and the queue's keys), ``position`` (this waiter's place in
    the lock's queue, 1 = next; None for a wait among several GPU slots,
    which is not ordered), ``text`` (the waiting line's words: the holder,
    and the place and ETA when known)."""

    __slots__ = ("waited", "changed", "holders", "position", "text")

    def __init__(
        self,
        waited: float,
        changed: bool,
        holders: List[Dict[str, Any]],
        position: Optional[int] = None,
        text: str = "",
    ) -> None:
        self.waited = waited
        self.changed = changed
        self.holders = holders
        self.position = position
        self.text = text

    def __repr__(self) -> str:
        return (
            f"WaitProgress(waited={self.waited:.3f}, changed={self.changed}, position={self.position}, "
            f"holders={self.holders!r}, text={self.text!r})"
        )
