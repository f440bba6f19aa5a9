"""One acquisition through the C library: the options struct, the waiting
line and the callbacks, the call itself, and where the call waits (the
calling thread, the main thread with Python's signal wakeup descriptor, or a
helper thread that a cancel pipe ends). Lock (in _lock.py) decides which."""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import threading
import time
import weakref
from typing import Any, Callable, Dict, List, Optional, cast

from . import _native as N
from . import _signals
from ._errors import Cancelled, failure
from ._handle import Handle, thread_owned
from ._inspect import info_dict
from ._wait_line import WaitLine, WaitProgress
from ._words import describe_wait


class Attempt:
    """One wait that can be abandoned from another thread: a pipe whose read
    end is among the cancel descriptors of the library's wait (lock_options
    cancel fds), which the library's in-process queue and its wait for the
    lock file both watch. cancel() makes it readable."""

    def __init__(self) -> None:
        self.r, self.w = os.pipe()

    def cancel(self) -> None:
        try:
            os.write(self.w, b"x")
        except OSError:
            pass

    def close(self) -> None:
        for fd in (self.r, self.w):
            try:
                os.close(fd)
            except OSError:
                pass


_main_pipe: Optional[tuple] = None


def _main_cancel_pipe() -> tuple:
    """The main thread's cancel pipe (non-blocking, as set_wakeup_fd wants);
    one per process."""
    global _main_pipe
    if _main_pipe is None or _main_pipe[2] != os.getpid():
        r, w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        _main_pipe = (r, w, os.getpid())
    return _main_pipe[0], _main_pipe[1]


def _drain(fd: int) -> bytes:
    data = b""
    while True:
        try:
            chunk = os.read(fd, 512)
        except (BlockingIOError, InterruptedError):
            return data
        if not chunk:
            return data
        data += chunk


def _forward(data: bytes, fd: int) -> None:
    # The signal numbers belong to whoever had the wakeup descriptor before
    # (asyncio's loop reads them to run its signal handlers).
    if data and fd >= 0:
        try:
            os.write(fd, data)
        except OSError:
            pass


def _run_signal_handlers() -> None:
    """Entering a Python function runs the handlers of signals that are
    pending (KeyboardInterrupt is raised from here)."""


class Calls:
    """The C-facing half of Lock: everything one call of the library needs.
    Reads the Lock's validated options (path, label, ttl_ms, gpus, gpu,
    priority, expect_ms, quiet, on_lost, on_progress, on_yield)."""

    path: Optional[str]
    label: Optional[str]
    ttl_ms: int
    gpus: int
    gpu: Optional[int]
    allowed: Optional[List[int]]
    priority: int
    expect_ms: int
    quiet: Optional[bool]
    on_lost: Optional[Callable[[str], None]]
    on_progress: Optional[Callable[[WaitProgress], None]]
    on_yield: Optional[Callable[[Dict[str, Any]], None]]
    _quick_options: Optional[tuple]

    def _options(self, base: str, wait_ms: int, cancel_fd: int, keep: list) -> N.Options:
        o = N.Options()
        N.options_init(ctypes.byref(o))
        b = os.fsencode(base)
        keep.append(b)
        o.path = b
        o.wait_ms = wait_ms
        if self.label is not None:
            lb = self.label.encode("utf-8", "replace")
            keep.append(lb)
            o.label = lb
        o.ttl_ms = self.ttl_ms
        o.gpus = self.gpus
        o.gpu = -1 if self.gpu is None else self.gpu
        if self.allowed and self.gpu is None:
            allowed = (ctypes.c_int * len(self.allowed))(*self.allowed)
            keep.append(allowed)
            o.allowed_gpus = allowed
            o.allowed_gpu_count = len(self.allowed)
        o.cancel_fd = cancel_fd
        o.priority = self.priority
        o.expect_ms = self.expect_ms
        return o

    def _progress(self, o: N.Options, keep: list, base: str) -> Optional[WaitLine]:
        quiet = self.quiet
        try:
            tty = sys.stderr is not None and sys.stderr.isatty()
        except (AttributeError, ValueError):
            tty = False
        line = None
        if quiet is False or (quiet is None and tty):
            line = WaitLine(tty)
        user = self.on_progress
        if line is None and user is None:
            return None

        def report(p: Any, _u: Any) -> None:
            try:
                pr = p.contents
                what = describe_wait(p, base)
                if line is not None:
                    line(pr.waited_ms, bool(pr.changed), what)
                if user is not None:
                    holders = [info_dict(pr.holders[k]) for k in range(pr.holder_count)]
                    user(WaitProgress(pr.waited_ms / 1000.0, bool(pr.changed), holders, pr.position or None, what))
            except Exception:
                pass  # the library's contract: never throw into it

        cb = N.PROGRESS_FN(report)
        keep.append(cb)
        o.on_progress = cb
        o.progress_every_ms = 1000 if (line is not None and line.tty) or user is not None else 60000
        return line

    def _lost(self, o: N.Options, h: Handle) -> None:
        user = self.on_lost
        if user is None:
            return
        ref = weakref.ref(h)

        def lost(message: bytes, _u: Any) -> None:
            # On the library's heartbeat thread: hand the call to a thread of
            # its own, so a slow callback (or one that releases) holds up
            # nothing.
            text = message.decode("utf-8", "replace")

            def call() -> None:
                if ref() is not None:
                    try:
                        user(text)
                    except Exception:
                        import traceback

                        traceback.print_exc()

            threading.Thread(target=call, name="offload_lock on_lost", daemon=True).start()

        cb = N.LOST_FN(lost)
        h._lost_cb = cb
        o.on_lost = cb

    def _yield(self, o: N.Options, h: Handle) -> None:
        user = self.on_yield
        if user is None:
            return

        def asked(r: Any, _u: Any) -> None:
            # On the library's heartbeat thread, as the contract says: the
            # callback runs here, so it must be quick and thread-safe.
            try:
                req = r.contents
                user({"pid": req.pid, "label": (req.label or b"").decode("utf-8", "replace"), "priority": req.priority})
            except Exception:
                import traceback

                traceback.print_exc()

        cb = N.YIELD_FN(asked)
        h._yield_cb = cb  # alive as long as the handle that the library may call it for
        o.on_yield = cb

    def _call(self, base: str, wait_ms: int, cancel_fd: int, progress: bool) -> Handle:
        """One call of the C acquisition on the calling thread."""
        h = Handle()
        quick = wait_ms == 0 and cancel_fd < 0 and not progress and self.on_lost is None and self.on_yield is None
        cached = self._quick_options
        if quick and cached is not None and cached[0] == base:
            o = cached[1]
            line = None
        else:
            keep: list = []
            o = self._options(base, wait_ms, cancel_fd, keep)
            line = self._progress(o, keep, base) if progress else None
            self._lost(o, h)
            self._yield(o, h)
            if quick:
                # Reused by later quick attempts (the fast path of every
                # uncontended `with`): the struct and the bytes it points to.
                self._quick_options = (base, o, keep)
        out = ctypes.c_void_p()
        msg = getattr(thread_owned, "msg", None)
        if msg is None:
            msg = thread_owned.msg = ctypes.create_string_buffer(2048)
        guard = _signals.current()
        if guard is not None:
            # From here until the caller has bound the handle, Ctrl-C is
            # deferred (see _signals); the wait is still cancelled by it.
            guard.arm()
        try:
            rc = N.acquire_ex(ctypes.byref(o), ctypes.byref(out), msg, len(msg))
            if out.value:
                h._h = out.value  # owned by the handle from here: its release (or __del__) gives it back
            err = N.last_errno()
        except BaseException:
            # An exception (a signal's handler outside a guard) landing as
            # the call returns, with the lock just taken: give it back
            # rather than leave it held for the life of the process.
            if out.value and h._h is None:
                N.release(out.value)
            elif h._h is not None:
                h.release()
            raise
        finally:
            if line is not None:
                line.end()
        if rc != N.OK:
            raise failure(rc, msg.value.decode("utf-8", "replace"), err, base)
        h.path = os.fsdecode(N.path(out.value))
        h.token = N.token(out.value).decode("utf-8", "replace")
        h.gpu = N.gpu(out.value)
        h.fence = int(N.fence(out.value))
        h.inherited = bool(N.inherited(out.value))
        return h

    def _wait_main(self, base: str, deadline: Optional[float]) -> Handle:
        """The library's wait on the main thread itself, with Python's signal
        wakeup descriptor pointed at the cancel pipe for the wait: a signal
        that has a Python handler (SIGINT's raises KeyboardInterrupt) ends
        the library's wait at once, its handler runs, and a handler that
        does not raise lets the wait go on. No thread to start, and no
        handoff between threads once the lock is taken."""
        r, w = _main_cancel_pipe()
        _drain(r)
        try:
            old = signal.set_wakeup_fd(w)
        except ValueError:  # not the main interpreter: a helper thread then
            attempt = Attempt()
            try:
                left = -1 if deadline is None else max(0, int((deadline - time.monotonic()) * 1000))
                return self._on_helper(base, left, attempt, True)
            finally:
                attempt.close()
        try:
            while True:
                _run_signal_handlers()  # one that came before the descriptor was ours
                guard = _signals.current()
                if guard is not None:
                    guard.run_pending()  # a deferred Ctrl-C: nothing is held now, so it may raise
                left = -1 if deadline is None else max(0, int((deadline - time.monotonic()) * 1000))
                try:
                    return self._call(base, left, r, True)
                except Cancelled:
                    _forward(_drain(r), old)
        finally:
            signal.set_wakeup_fd(old)
            _forward(_drain(r), old)

    def _on_helper(self, base: str, wait_ms: int, attempt: Attempt, wait_here: bool) -> Handle:
        """The C wait on a helper thread, which the attempt's pipe ends. With
        wait_here, this thread waits interruptibly (Ctrl-C on the main
        thread cancels and cleans up)."""
        box: Dict[str, Any] = {}
        done = threading.Lock()
        done.acquire()

        def run() -> None:
            try:
                box["h"] = self._call(base, wait_ms, attempt.r, True)
            except BaseException as e:  # handed back to the waiting thread
                box["e"] = e
            finally:
                done.release()

        threading.Thread(target=run, name="offload_lock wait", daemon=True).start()
        try:
            done.acquire()
        except BaseException:
            attempt.cancel()
            _acquire_uninterrupted(done)
            h = box.get("h")
            if h is not None:
                h.release()
            raise
        if "e" in box:
            raise box["e"]
        return cast(Handle, box["h"])



def _acquire_uninterrupted(lk: Any) -> None:
    # The cleanup after a Ctrl-C must finish even if another one comes.
    pending: Optional[BaseException] = None
    while True:
        try:
            lk.acquire()
            break
        except BaseException as e:
            pending = e
    if pending is not None and not isinstance(pending, KeyboardInterrupt):
        raise pending


