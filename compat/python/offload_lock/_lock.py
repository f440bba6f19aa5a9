"""Lock, lock() and lock_async(): the machine-wide GPU lock for a block, a
function or a task.

Every decision about the lock directory (take, wait, judge stale, reclaim,
release by ownership, heartbeat, pass-through to child processes) is made by
the C++ library behind the C API, and so are the words and the grammar
(_words), and so is the queue among the threads of this process (the
library's in-process queue, which a cancel descriptor leaves). This module
adds what Python needs around it: nesting per thread and asyncio task (a
ContextVar), a wait that Ctrl-C or a task cancellation can end (_acquire),
and binding a taken lock to its block atomically with respect to Ctrl-C
(_signals).
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import inspect as _inspect
import os
import threading
import time
import warnings
from typing import Any, Callable, Dict, List, Optional, Sequence, TypeVar, Union, cast

from . import _signals
from ._acquire import Attempt, Calls
from ._errors import Busy, Cancelled, LockError
from ._handle import Handle, export_env, held_locks, live, owned_here, parent_held, passthrough
from ._inspect import default_path, token_holds
from ._wait_line import WaitProgress
from ._words import Duration, choose_slots, gpu_count, lock_identity, parse_duration, parse_priority

F = TypeVar("F", bound=Callable[..., Any])


def _expect_ms(value: Duration) -> int:
    """A declared duration in milliseconds; 0 for None (undeclared)."""
    if value is None:
        return 0
    seconds = parse_duration(value, what="expect", allow_forever=False)
    if seconds is None or seconds <= 0 or seconds == float("inf"):
        raise ValueError(f"expect: {value!r} (a finite duration longer than 0)")
    return max(1, int(round(seconds * 1000)))


class Lock(Calls):
    """The machine-wide GPU lock with its options, not yet taken.

    ``with lock(...) as h:``, ``async with lock_async(...) as h:`` and
    ``@lock(...)`` (on a function or a coroutine function) take it for the
    block or the call and release it at the end, also on an exception.
    ``acquire()`` / ``acquire_async()`` return a Handle to release yourself.
    One Lock object may be used by many threads and tasks at once.
    """

    def __init__(
        self,
        path: Optional[Union[str, "os.PathLike[str]"]] = None,
        *,
        wait: Duration = None,
        label: Optional[str] = None,
        ttl: Duration = None,
        gpus: Optional[Union[int, str]] = None,
        gpu: Optional[int] = None,
        allowed_gpus: Optional[Sequence[int]] = None,
        priority: Union[None, int, str] = None,
        expect: Duration = None,
        quiet: Optional[bool] = None,
        on_lost: Optional[Callable[[str], None]] = None,
        on_progress: Optional[Callable[[WaitProgress], None]] = None,
        on_yield: Optional[Callable[[Dict[str, Any]], None]] = None,
    ) -> None:
        self.priority = parse_priority(priority)
        self.expect_ms = _expect_ms(expect)
        self.path = os.fspath(path) if path is not None else None
        if self.path == "":
            raise ValueError("path: empty")
        self.wait = parse_duration(wait, what="wait")
        ttl_s = parse_duration(ttl, what="ttl") if ttl is not None else None
        if ttl_s is not None and ttl_s <= 0:
            raise ValueError("ttl: must be above 0")
        self.ttl_ms = 0 if ttl_s is None else max(1, int(round(ttl_s * 1000)))
        if gpus == "auto":
            # As `--gpus auto`: the library's count; one slot when it finds none.
            gpus = max(1, gpu_count())
        if gpus is not None and (isinstance(gpus, bool) or not isinstance(gpus, int) or not 1 <= gpus <= 1024):
            raise ValueError(f"gpus: {gpus!r} (1 to 1024, or 'auto')")
        if gpu is not None and (isinstance(gpu, bool) or not isinstance(gpu, int) or not 0 <= gpu < 1024):
            raise ValueError(f"gpu: {gpu!r} (0 to 1023)")
        if gpus is not None and gpu is not None and gpu >= gpus:
            raise ValueError(f"gpu: slot {gpu} of {gpus}")
        self.gpus = 1 if gpus is None else gpus
        self.gpu = gpu
        self.allowed: Optional[List[int]] = None
        if allowed_gpus is not None:
            # Given: exactly these slots (the library checks each is one of
            # the gpus), whatever CUDA_VISIBLE_DEVICES says.
            if isinstance(allowed_gpus, (str, bytes)) or not all(
                    isinstance(k, int) and not isinstance(k, bool) for k in allowed_gpus):
                raise ValueError(f"allowed_gpus: {allowed_gpus!r} (a list of slot numbers)")
            self.allowed = list(allowed_gpus)
            if len(self.allowed) == 1 and self.gpu is None:
                self.gpu = self.allowed[0]
        elif self.gpus > 1 or self.gpu is not None:
            # As the command: under CUDA_VISIBLE_DEVICES only the slots of the
            # GPUs it names (one named: that slot).
            slot, allowed, note = choose_slots(self.gpus, self.gpu)
            if note and not quiet:
                warnings.warn(f"CUDA_VISIBLE_DEVICES: {note}", RuntimeWarning, stacklevel=3)
            self.gpu = slot
            if allowed is not None and len(allowed) < self.gpus:
                self.allowed = allowed
        self.label = label
        self.quiet = quiet
        self.on_lost = on_lost
        self.on_progress = on_progress
        self.on_yield = on_yield
        self._quick_options: Optional[tuple] = None
        self._entered: "contextvars.ContextVar[tuple]" = contextvars.ContextVar(f"offload_lock_entered_{id(self)}", default=())

    def __repr__(self) -> str:
        return f"offload_lock.lock({self.path!r}, wait={self.wait!r}, gpus={self.gpus}, gpu={self.gpu})"

    # -- what one acquisition resolves --

    def _base(self) -> str:
        return self.path if self.path is not None else default_path()

    def _any_slot(self) -> bool:
        return self.gpus > 1 and self.gpu is None

    def _take(self, attempt_factory: Callable[[], Attempt], in_helper: bool) -> Handle:
        """One acquisition, nesting and pass-through aside. in_helper: the
        calling thread is already a helper (asyncio); wait on it directly.
        The threads of this process queue for the lock inside the library
        (priority, then arrival); every wait there watches the cancel
        descriptor it is given."""
        base = self._base()
        key = lock_identity(base)
        wait = self.wait
        deadline = None if wait is None else time.monotonic() + wait
        owned = owned_here()
        here_ok = not (self._any_slot() and any(k.startswith(key) for k in owned))
        h: Optional[Handle] = None
        on_this_thread = here_ok and not in_helper
        if on_this_thread:
            try:
                h = self._call(base, 0, -1, False)
            except Busy:
                if wait == 0:
                    raise
        if h is None:
            left = -1 if deadline is None else max(0, int((deadline - time.monotonic()) * 1000))
            if in_helper:
                h = self._call(base, left, attempt_factory().r, True)
            elif on_this_thread and threading.current_thread() is threading.main_thread():
                h = self._wait_main(base, deadline)
            elif on_this_thread:
                # No signal reaches this thread; nothing to cancel it with.
                h = self._call(base, left, -1, True)
            else:
                attempt = attempt_factory()
                try:
                    h = self._on_helper(base, left, attempt, True)
                finally:
                    attempt.close()
        if on_this_thread:
            owned.add(lock_identity(h.path))
            h._owned_set = owned
            h._owned_key = lock_identity(h.path)
        h._key = key
        if not h.inherited:
            live.add(h)
            export_env(h)
        return h

    def _enter_checks(self) -> Optional[Handle]:
        """A handle that passes straight through, or None to acquire."""
        held = held_locks.get()
        if not held and not parent_held:
            return None
        key = lock_identity(self._base())
        outer = held.get(key)
        if outer is not None and outer.held:
            return passthrough(outer)
        parent = parent_held.get(key)
        if parent is not None:
            # Forked while the parent held this lock. The library's state
            # for it was copied mid-hold and cannot be used here: pass
            # through while the parent still holds it.
            if token_holds(parent.path, parent.token):
                return passthrough(parent, inherited=True)
            raise LockError(
                f"{parent.path}: this process was forked while its parent held this lock; "
                "it cannot take the lock again itself (start it with the spawn method instead)",
                parent.path,
            )
        return None

    # -- the public face --

    def acquire(self) -> Handle:
        """Takes the lock, waiting as ``wait`` says, and returns the Handle.
        Blocks the calling thread (the GIL is released while waiting).
        Raises Busy (wait 0), Timeout, OSError (system failures, with errno
        and path), KeyboardInterrupt when Ctrl-C ends the wait (nothing is
        left behind: no lock, no waiter entry). A lock this thread or task
        already holds passes straight through (``nested``)."""
        h = self._enter_checks()
        if h is not None:
            return h
        return self._take(Attempt, in_helper=False)

    async def acquire_async(self) -> Handle:
        """As acquire(), without blocking the event loop: an uncontended
        lock is taken at once, a wait runs on a helper thread. Cancelling
        the task ends the wait and leaves nothing behind."""
        h = self._enter_checks()
        if h is not None:
            return h
        # Try once on the loop thread: no thread for an uncontended lock.
        quick = Lock.__new__(Lock)
        quick.__dict__.update(self.__dict__)
        quick.wait = 0
        try:
            return quick._take(Attempt, in_helper=False)
        except Busy:
            if self.wait == 0:
                raise
        loop = asyncio.get_running_loop()
        fut: asyncio.Future = loop.create_future()
        attempt = Attempt()
        finished = threading.Event()
        box: Dict[str, Any] = {}

        def run() -> None:
            try:
                box["h"] = self._take(lambda: attempt, in_helper=True)
            except BaseException as e:
                box["e"] = e
            finally:
                finished.set()
                loop.call_soon_threadsafe(_settle, fut)

        threading.Thread(target=run, name="offload_lock async wait", daemon=True).start()
        try:
            await fut
        except BaseException:
            attempt.cancel()
            finished.wait()
            attempt.close()
            h = box.get("h")
            if h is not None:
                h.release()
            raise
        attempt.close()
        if "e" in box:
            e = box["e"]
            raise (LockError(str(e)) if isinstance(e, Cancelled) else e)
        return cast(Handle, box["h"])

    def _push(self, h: Handle) -> None:
        held = held_locks.get()
        token = None
        if not h.nested:
            d = dict(held)
            d[h._key] = h
            token = held_locks.set(d)
        self._entered.set(self._entered.get() + ((h, token),))

    def _pop(self) -> Handle:
        stack = self._entered.get()
        h, token = stack[-1]
        self._entered.set(stack[:-1])
        if token is not None:
            try:
                held_locks.reset(token)
            except ValueError:  # exited in another context than entered
                d = dict(held_locks.get())
                d.pop(h._key, None)
                held_locks.set(d)
        return h

    def __enter__(self) -> Handle:
        # Taking the lock and binding it to this block is one step as far as
        # Ctrl-C goes: a KeyboardInterrupt either ends the wait with nothing
        # held, or comes once the block owns the lock (see _signals).
        guard = _signals.Guard()
        _signals.push(guard)
        try:
            h = self.acquire()
            self._push(h)
        except BaseException:
            _signals.pop(guard)
            if guard.disarm():
                guard.replay()  # nothing is held: it may raise KeyboardInterrupt
            raise
        _signals.pop(guard)
        try:
            # A SIGINT that came meanwhile, or one landing as the handler
            # is put back, is raised here, and the block gives the lock back.
            if guard.disarm():
                guard.replay()
        except BaseException:
            _release_uninterrupted(self._pop())
            raise
        return h

    def __exit__(self, *exc: Any) -> None:
        _release_uninterrupted(self._pop())

    async def __aenter__(self) -> Handle:
        h = await self.acquire_async()
        self._push(h)
        return h

    async def __aexit__(self, *exc: Any) -> None:
        self._pop().release()

    def __call__(self, fn: F) -> F:
        """As a decorator: each call of ``fn`` holds the lock (an ``async
        def`` holds it without blocking the event loop)."""
        if _inspect.iscoroutinefunction(fn):

            @functools.wraps(fn)
            async def awrapper(*args: Any, **kwargs: Any) -> Any:
                async with self:
                    return await fn(*args, **kwargs)

            return cast(F, awrapper)

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            with self:
                return fn(*args, **kwargs)

        return cast(F, wrapper)


def _release_uninterrupted(h: Handle) -> None:
    """Releases `h` with its bookkeeping (the in-process queue's turn, the
    environment) finished before a Ctrl-C is let through."""
    guard = _signals.Guard()
    guard.arm()
    try:
        h.release()
    finally:
        if guard.disarm():
            guard.replay()


def _settle(fut: asyncio.Future) -> None:
    if not fut.done():
        fut.set_result(None)
