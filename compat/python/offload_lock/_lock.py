"""lock() and lock_async(): the machine-wide GPU lock for a block, a function or a task.

Every decision about the lock directory (take, wait, judge stale, reclaim,
release by ownership, heartbeat, pass-through to child processes) is made by
the C++ library behind the C API. This module adds what Python needs around
it: nesting per thread and asyncio task (a ContextVar), a queue among the
threads of this process that a Ctrl-C or a task cancellation can leave, a
wait on a helper thread that a cancel pipe ends, the environment that child
processes inherit, and release at exit.
"""

from __future__ import annotations

import asyncio
import atexit
import itertools
import contextvars
import ctypes
import errno as _errno
import functools
import inspect as _inspect
import os
import re
import signal
import sys
import threading
import time
import weakref
from datetime import timedelta
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple, TypeVar, Union, cast

from . import _native as N

Duration = Union[None, int, float, str, timedelta]
F = TypeVar("F", bound=Callable[..., Any])


# ---- errors ----


class LockError(Exception):
    """The lock could not be taken. ``path`` names the lock (or GPU slot)."""

    def __init__(self, message: str, path: Optional[str] = None) -> None:
        super().__init__(message)
        self.path = path


class Busy(LockError):
    """Held by someone else, and the caller asked to try once (``wait=0``)."""


class Timeout(LockError, TimeoutError):
    """Still held by someone else when the wait ended."""


class _Cancelled(Exception):
    """A wait abandoned through its cancel pipe (Ctrl-C, task cancellation)."""


def _failure(rc: int, message: str, err: int, path: str) -> BaseException:
    if rc == N.BUSY:
        return Busy(message, path)
    if rc == N.TIMED_OUT:
        return Timeout(message, path)
    if rc == N.CANCELLED:
        return _Cancelled(message)
    if rc == N.INVALID:
        return ValueError(message)
    if err:
        # OSError(errno, ...) gives the matching subclass (PermissionError,
        # FileNotFoundError, NotADirectoryError ...).
        return OSError(err, message, path)
    return LockError(message, path)


# ---- durations ----

_DUR = re.compile(r"^(\d+(?:\.\d*)?|\.\d+)(ms|s|m|h)?$")
_UNIT_S = {None: 1.0, "ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_duration(value: Duration, *, what: str = "wait", allow_forever: bool = True) -> Optional[float]:
    """Seconds from a wait or TTL as the CLI takes it.

    ``None`` and ``"forever"`` mean no limit (None is returned); a number is
    seconds; a string is ``0``, seconds (fractions allowed), or a number with
    ``ms``, ``s``, ``m`` or ``h``; a ``timedelta`` is taken as is. Negative
    values and anything else raise ``ValueError`` (``TypeError`` for bools
    and other types).
    """
    if value is None:
        if allow_forever:
            return None
        raise ValueError(f"{what}: a duration is required")
    if isinstance(value, bool):
        raise TypeError(f"{what}: a duration, not a bool")
    if isinstance(value, timedelta):
        seconds = value.total_seconds()
    elif isinstance(value, (int, float)):
        seconds = float(value)
    elif isinstance(value, str):
        v = value.strip()
        if v == "forever":
            if allow_forever:
                return None
            raise ValueError(f"{what}: 'forever' is not allowed here")
        m = _DUR.match(v)
        if not m:
            raise ValueError(f"{what}: {value!r} is not a duration (0, 1.5, 500ms, 42s, 5m, 2h, forever)")
        seconds = float(m.group(1)) * _UNIT_S[m.group(2)]
    else:
        raise TypeError(f"{what}: a number of seconds, a DUR string or a timedelta, not {type(value).__name__}")
    if seconds != seconds or seconds < 0:
        raise ValueError(f"{what}: {value!r} is negative")
    if seconds == float("inf"):
        return None if allow_forever else float("inf")
    return seconds


# ---- priority and declared duration ----

PRIORITY_NAMES: Mapping[str, int] = {"batch": -10, "normal": 0, "interactive": 10}
_INT = re.compile(r"^[+-]?\d+$")


def parse_priority(value: Union[None, int, str]) -> int:
    """A queue priority as the CLI's ``--priority`` takes it: an integer from
    -100 to 100 (higher is served first), or ``"batch"`` (-10), ``"normal"``
    (0, also for None) or ``"interactive"`` (10). Anything else raises
    ``ValueError`` naming the value."""
    if value is None:
        return 0
    n: Optional[int] = None
    if isinstance(value, str):
        v = value.strip()
        if v in PRIORITY_NAMES:
            return PRIORITY_NAMES[v]
        if _INT.match(v):
            n = int(v)
    elif isinstance(value, int) and not isinstance(value, bool):
        n = value
    if n is None or not -100 <= n <= 100:
        raise ValueError(f"priority: {value!r} (an integer from -100 to 100, or 'batch', 'normal', 'interactive')")
    return n


def _expect_ms(value: Duration) -> int:
    """A declared duration in milliseconds; 0 for None (undeclared)."""
    if value is None:
        return 0
    seconds = parse_duration(value, what="expect", allow_forever=False)
    if seconds is None or seconds <= 0 or seconds == float("inf"):
        raise ValueError(f"expect: {value!r} (a finite duration longer than 0)")
    return max(1, int(round(seconds * 1000)))


# ---- what the C API reports, as dictionaries ----


def _s(b: bytes) -> str:
    return b.decode("utf-8", "replace")


def _info_dict(i: N.InfoEx) -> Dict[str, Any]:
    """One lock (or slot) with the keys of `offload-lock --json status`."""
    held = bool(i.held)
    return {
        "path": os.fsdecode(i.path),
        "held": held,
        "pid": i.pid if i.has_pid else None,
        "startedAt": i.started_at_ms if i.has_started_at else None,
        "heldForMs": i.held_for_ms if held else None,
        "label": _s(i.label) or None,
        "host": _s(i.host) or None,
        "token": _s(i.token) or None,
        "stale": _s(i.stale) if i.has_stale else None,
        "ownerUid": i.owner_uid if i.owner_uid >= 0 else None,
        "v1Stale": _s(i.v1_stale) if i.has_v1_stale else None,
        "otherPidNamespace": bool(i.other_pid_namespace),
    }


def _queue_dict(q: N.QueueInfo, held: bool) -> Dict[str, Any]:
    """The holder's declarations and the queue's request, with the keys and
    the nulls of `offload-lock --json status`."""
    y = None
    if held and q.has_yield_request:
        y = {"pid": q.yield_pid, "label": _s(q.yield_label), "priority": q.yield_priority}
    return {
        "priority": q.priority if held else None,
        "expectMs": q.expect_ms if held and q.expect_ms > 0 else None,
        "freeInMs": (q.free_in_ms if q.free_in_ms >= 0 else None) if held else 0,
        "yieldRequested": y,
    }


def _inspect_both(path: str, ttl_ms: int = 0) -> Tuple[Dict[str, Any], Dict[str, Any]]:
    """One inspection: the lock's keys and the queue's keys."""
    info = N.InfoEx()
    q = N.QueueInfo()
    q.size = ctypes.sizeof(q)
    rc = N.inspect_queue(os.fsencode(path), ttl_ms, ctypes.byref(info), ctypes.byref(q))
    if rc == N.ERROR:
        raise OSError(_errno.EIO, _s(info.problem), path)
    return _info_dict(info), _queue_dict(q, bool(info.held))


def _inspect_one(path: str, ttl_ms: int = 0) -> Dict[str, Any]:
    return _inspect_both(path, ttl_ms)[0]


def _who(h: Mapping[str, Any]) -> str:
    s = f"{h.get('label') or 'an unnamed holder'} (pid {h['pid'] if h.get('pid') is not None else 'unknown'}"
    if h.get("host"):
        s += f", host {h['host']}"
    return s + ")"


def _held_for(h: Mapping[str, Any]) -> str:
    return N.describe_duration(h.get("heldForMs") or 0)


def _holders_text(hs: List[Dict[str, Any]]) -> str:
    # The words of the CLI's wait line.
    if len(hs) == 1:
        return f"{_who(hs[0])}, held for {_held_for(hs[0])}"
    parts = [f"gpu{k} {_who(h)} {_held_for(h)}" for k, h in enumerate(hs)]
    return f"any of {len(hs)} GPUs: " + "; ".join(parts)


def _state_text(h: Mapping[str, Any]) -> str:
    if h["held"]:
        return f"held by {_who(h)} for {_held_for(h)}"
    if h.get("stale") is None and h.get("pid") is None and h.get("token") is None:
        return "free"
    return f"free (stale lock of {_who(h)}: {h.get('stale') or 'unknown'})"


# ---- the pieces of one acquisition ----


def _gpu_slot_path(base: str, gpu: int) -> str:
    return base if gpu <= 0 else f"{base}.gpu{gpu}"


_canon_cache: Dict[str, str] = {}


def _canonical(path: str) -> str:
    """One name per lock directory, for nesting and the in-process queue."""
    c = _canon_cache.get(path)
    if c is None:
        a = os.path.abspath(path)
        c = os.path.join(os.path.realpath(os.path.dirname(a)), os.path.basename(a))
        if len(_canon_cache) > 256:
            _canon_cache.clear()
        _canon_cache[path] = c
    return c


class _Attempt:
    """One wait that can be abandoned from another thread: a flag for the
    in-process queue and a pipe for the library's wait."""

    def __init__(self) -> None:
        self.cancelled = False
        self.r, self.w = os.pipe()
        self.gate: Optional[_Gate] = None

    def cancel(self) -> None:
        self.cancelled = True
        try:
            os.write(self.w, b"x")
        except OSError:
            pass
        g = self.gate
        if g is not None:
            with g.cond:
                g.cond.notify_all()

    def close(self) -> None:
        for fd in (self.r, self.w):
            try:
                os.close(fd)
            except OSError:
                pass


class _Gate:
    """The threads (and asyncio tasks) of this process that want one lock
    directory take turns here before the library is asked, in the lock's
    order: priority (highest first), then arrival.

    The library has such a queue too, but its wait there does not watch the
    cancel descriptor; this one can be left by Ctrl-C (the wait is
    interruptible on the main thread) and by cancellation (_Attempt.cancel).
    """

    def __init__(self) -> None:
        self.mu = threading.Lock()
        self.cond = threading.Condition(self.mu)
        self.owner: Optional[object] = None
        # (-priority, arrival, ticket): the smallest is served next.
        self.queue: List[tuple] = []
        self.arrivals = itertools.count()

    def try_claim(self, who: object) -> bool:
        with self.mu:
            if self.owner is None and not self.queue:
                self.owner = who
                return True
            return False

    def claim(self, who: object, deadline: Optional[float], attempt: Optional[_Attempt], priority: int = 0) -> bool:
        """Waits for our turn; False when the deadline passed first. Raises
        _Cancelled when the attempt is cancelled."""
        with self.cond:
            if self.owner is None and not self.queue:
                self.owner = who
                return True
            ticket = (-priority, next(self.arrivals), object())
            self.queue.append(ticket)
            try:
                while True:
                    if attempt is not None and attempt.cancelled:
                        raise _Cancelled("cancelled")
                    if self.owner is None and min(self.queue) is ticket:
                        self.owner = who
                        return True
                    timeout = None if deadline is None else deadline - time.monotonic()
                    if timeout is not None and timeout <= 0:
                        return False
                    self.cond.wait(timeout)
            finally:
                self.queue.remove(ticket)
                self.cond.notify_all()

    def release(self, who: object) -> None:
        with self.mu:
            if self.owner is who:
                self.owner = None
                if self.queue:
                    self.cond.notify_all()


_gates_mu = threading.Lock()
_gates: "weakref.WeakValueDictionary[str, _Gate]" = weakref.WeakValueDictionary()


def _gate_for(slot_key: str) -> _Gate:
    with _gates_mu:
        g = _gates.get(slot_key)
        if g is None:
            g = _Gate()
            _gates[slot_key] = g
        return g


# The slot keys whose library-level acquisition was made on this OS thread.
# The library treats another acquisition of the same lock from the same
# thread as nested; when the Python-level nesting says it is not (another
# asyncio task, another context), the call goes to a helper thread instead.
_thread_owned = threading.local()


def _owned_here() -> set:
    s = getattr(_thread_owned, "keys", None)
    if s is None:
        s = set()
        _thread_owned.keys = s
    return s


# ---- handles ----

_HELD, _RELEASING, _RELEASED = 0, 1, 2


class Handle:
    """A held lock. ``path`` is the lock (or GPU slot) directory held,
    ``token`` its token, ``gpu`` the slot. ``nested`` is True for a lock this
    thread or task already held (it passes straight through), ``inherited``
    for the parent process's lock passed down to this one; releasing either
    leaves the lock alone.

    Thread safety: release() may be called from any thread, once or more;
    the first call releases.
    """

    __slots__ = (
        "path", "token", "gpu", "nested", "inherited", "_h", "_pid", "_outer", "_state", "_mu", "_lost_cb", "_yield_cb",
        "_env_saved", "_env_set", "_gate", "_gate_owner", "_owned_set", "_owned_key", "_key", "__weakref__",
    )

    def __init__(self) -> None:
        self.path = ""
        self.token = ""
        self.gpu = 0
        self.nested = False
        self.inherited = False
        self._h: Optional[int] = None  # the C handle
        self._pid = os.getpid()
        self._outer: Optional[Handle] = None
        self._state = _HELD
        self._mu = threading.Lock()
        self._lost_cb: Any = None
        self._yield_cb: Any = None
        self._env_saved: Optional[Dict[str, Optional[str]]] = None
        self._env_set: Optional[Dict[str, str]] = None
        self._gate: Optional[_Gate] = None
        self._gate_owner: Optional[object] = None
        self._owned_set: Optional[set] = None
        self._owned_key: Optional[str] = None
        self._key = ""

    def __repr__(self) -> str:
        kind = " nested" if self.nested else " inherited" if self.inherited else ""
        state = {_HELD: "held", _RELEASING: "releasing", _RELEASED: "released"}[self._state]
        return f"<offload_lock.Handle{kind} {self.path!r} gpu={self.gpu} {state}>"

    @property
    def held(self) -> bool:
        """True until release() (by this object's account; see still_held())."""
        return self._state == _HELD

    def still_held(self) -> bool:
        """Checks the file system: is the lock directory still the one this
        holder took, with its token? Call it before an irreversible step.
        False after release() and in a process forked from the holder."""
        if self._state != _HELD:
            return False
        if self._outer is not None:
            return self._outer.still_held()
        if self._h is None or os.getpid() != self._pid:
            # A forked child: the lock is its parent's; look, don't touch.
            return _token_holds(self.path, self.token)
        return bool(N.still_held(self._h))

    def yield_requested(self) -> bool:
        """True once a waiter of a higher priority than this holder's has
        asked it to make way (``on_yield`` has been called). Always False
        for a lock taken without ``on_yield``, after release(), and in a
        process forked from the holder. Never blocks."""
        if self._state != _HELD:
            return False
        if self._outer is not None:
            return self._outer.yield_requested()
        if self._h is None or os.getpid() != self._pid:
            return False
        return bool(N.yield_requested(self._h))

    def release(self) -> bool:
        """Releases the lock if it is still this holder's. Returns True when
        released (or nothing was ours to release: a nested or inherited
        handle, a second call, a process forked from the holder), False when
        the lock had been removed or replaced by someone else meanwhile.
        Raises OSError when the directory cannot be removed."""
        with self._mu:
            if self._state != _HELD:
                return True
            self._state = _RELEASING
        try:
            if self._h is None:
                return True
            if os.getpid() != self._pid:
                # Never release the parent's lock from a forked child.
                self._h = None
                return True
            h, self._h = self._h, None
            rc = N.release(h)
            # Bookkeeping after the release itself: the shorter the hold
            # around an empty block, the less the library's heartbeat thread
            # has to do for it.
            _restore_env(self)
            _live.discard(self)
            if self._owned_set is not None:
                self._owned_set.discard(self._owned_key)
            if self._gate is not None:
                self._gate.release(self._gate_owner)
            if rc == N.OK:
                return True
            if rc == N.LOST:
                return False
            raise OSError(_errno.EIO, f"cannot release lock {self.path}", self.path)
        finally:
            self._state = _RELEASED

    def child_environment(self) -> Dict[str, str]:
        """OFFLOAD_LOCK_PATH and OFFLOAD_LOCK_TOKEN for a child process, so
        that its own acquisitions of this lock pass straight through. (They
        are in os.environ while the lock is held, so subprocess and
        multiprocessing children get them anyway.)"""
        if self._outer is not None:
            return self._outer.child_environment()
        if self._h is None:
            return {"OFFLOAD_LOCK_PATH": self.path, "OFFLOAD_LOCK_TOKEN": self.token}
        n = N.child_environment(self._h, None, 0)
        buf = ctypes.create_string_buffer(n + 1)
        N.child_environment(self._h, buf, n + 1)
        env = {}
        for item in buf.raw[:n].split(b"\0"):
            if item:
                k, _, v = item.partition(b"=")
                env[os.fsdecode(k)] = os.fsdecode(v)
        return env

    def __del__(self) -> None:
        # A handle dropped while held (a generator never closed, a lost
        # reference) must not keep the GPU for the life of the process.
        try:
            if self._state == _HELD and self._h is not None and os.getpid() == self._pid:
                self.release()
        except Exception:
            pass


def _token_holds(path: str, token: str) -> bool:
    try:
        i = _inspect_one(path)
    except OSError:
        return False
    return bool(i["held"]) and i["token"] == token


# Every handle this process holds in the library, for release at exit.
_live: "weakref.WeakSet[Handle]" = weakref.WeakSet()


def _release_all_at_exit() -> None:
    for h in list(_live):
        try:
            if os.getpid() == h._pid:
                h.release()
        except Exception:
            pass


atexit.register(_release_all_at_exit)


# ---- the environment children inherit (B11) ----

_ENV_KEYS = ("OFFLOAD_LOCK_PATH", "OFFLOAD_LOCK_TOKEN")
_env_mu = threading.Lock()


def _export_env(h: Handle) -> None:
    # What the library's child_environment() gives for a lock held here:
    # the directory held and its token.
    env = {"OFFLOAD_LOCK_PATH": h.path, "OFFLOAD_LOCK_TOKEN": h.token}
    with _env_mu:
        environ = os.environ
        h._env_saved = {k: environ.get(k) for k in _ENV_KEYS}
        h._env_set = env
        environ.update(env)


def _restore_env(h: Handle) -> None:
    with _env_mu:
        if h._env_set is None or h._env_saved is None:
            return
        # Only when nothing else has been exported since (another lock).
        environ = os.environ
        if environ.get("OFFLOAD_LOCK_TOKEN") == h.token and environ.get("OFFLOAD_LOCK_PATH") == h.path:
            for k, old in h._env_saved.items():
                if old is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = old
        h._env_set = None


# ---- nesting and fork ----

# The locks the current thread or asyncio task holds: canonical base path ->
# the outermost handle.
_held: "contextvars.ContextVar[Mapping[str, Handle]]" = contextvars.ContextVar("offload_lock_held", default={})

# In a process forked while this one held locks: canonical base path -> the
# parent's handle, for locks the parent held at the fork.
_parent_held: Dict[str, Handle] = {}


# Counts forks, so gates cached before a fork are not used after it.
_fork_generation = [0]


def _after_fork_in_child() -> None:
    global _gates_mu, _env_mu
    _fork_generation[0] += 1
    _gates_mu = threading.Lock()
    _env_mu = threading.Lock()
    _gates.clear()
    _thread_owned.keys = set()
    for h in list(_live):
        _parent_held[h._key] = h
    _live.clear()


os.register_at_fork(after_in_child=_after_fork_in_child)


def _passthrough(outer: Handle, inherited: bool = False) -> Handle:
    h = Handle()
    h.path, h.token, h.gpu = outer.path, outer.token, outer.gpu
    h.nested = not inherited
    h.inherited = inherited
    h._outer = outer
    h._key = outer._key
    return h


# ---- the wait line ----


class _WaitLine:
    """The CLI's wait line on stderr: on a terminal one line rewritten every
    second and cleared at the end; elsewhere a line when the holder changes
    and a reminder every minute."""

    def __init__(self, tty: bool) -> None:
        self.tty = tty
        self.shown = False

    def __call__(self, waited_ms: int, changed: bool, holders: List[Dict[str, Any]]) -> None:
        try:
            if self.tty:
                line = f"offload-lock: waiting {N.describe_duration(waited_ms)} for {_holders_text(holders)}"
                try:
                    width = os.get_terminal_size(sys.stderr.fileno()).columns
                except (OSError, ValueError):
                    width = 0
                if width > 1 and len(line) >= width:
                    line = line[: width - 1]
                sys.stderr.write("\r\x1b[K" + line)
                self.shown = True
            elif changed:
                sys.stderr.write(f"offload-lock: waiting for {_holders_text(holders)}\n")
            else:
                sys.stderr.write(
                    f"offload-lock: still waiting for {_holders_text(holders)}; "
                    f"waited {N.describe_duration(waited_ms)}\n"
                )
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
    which is not ordered)."""

    __slots__ = ("waited", "changed", "holders", "position")

    def __init__(
        self, waited: float, changed: bool, holders: List[Dict[str, Any]], position: Optional[int] = None
    ) -> None:
        self.waited = waited
        self.changed = changed
        self.holders = holders
        self.position = position

    def __repr__(self) -> str:
        return (
            f"WaitProgress(waited={self.waited:.3f}, changed={self.changed}, position={self.position}, "
            f"holders={self.holders!r})"
        )


# ---- the lock ----


def _detect_gpus() -> int:
    try:
        n = len(os.listdir("/proc/driver/nvidia/gpus"))
        if n > 0:
            return n
    except OSError:
        pass
    try:
        import subprocess

        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=10).stdout
        n = sum(1 for line in out.splitlines() if line.startswith("GPU "))
        if n > 0:
            return n
    except (OSError, subprocess.SubprocessError):
        pass
    return 1


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


class Lock:
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
            gpus = _detect_gpus()
        if gpus is not None and (isinstance(gpus, bool) or not isinstance(gpus, int) or not 1 <= gpus <= 1024):
            raise ValueError(f"gpus: {gpus!r} (1 to 1024, or 'auto')")
        if gpu is not None and (isinstance(gpu, bool) or not isinstance(gpu, int) or not 0 <= gpu < 1024):
            raise ValueError(f"gpu: {gpu!r} (0 to 1023)")
        if gpus is not None and gpu is not None and gpu >= gpus:
            raise ValueError(f"gpu: slot {gpu} of {gpus}")
        self.gpus = 1 if gpus is None else gpus
        self.gpu = gpu
        self.label = label
        self.quiet = quiet
        self.on_lost = on_lost
        self.on_progress = on_progress
        self.on_yield = on_yield
        self._gate_cache: Optional[tuple] = None
        self._quick_options: Optional[tuple] = None
        self._entered: "contextvars.ContextVar[tuple]" = contextvars.ContextVar(f"offload_lock_entered_{id(self)}", default=())

    def __repr__(self) -> str:
        return f"offload_lock.lock({self.path!r}, wait={self.wait!r}, gpus={self.gpus}, gpu={self.gpu})"

    # -- what one acquisition resolves --

    def _base(self) -> str:
        if self.path is not None:
            return self.path
        n = N.default_path(None, 0)
        buf = ctypes.create_string_buffer(n + 1)
        N.default_path(buf, n + 1)
        return os.fsdecode(buf.value)

    def _any_slot(self) -> bool:
        return self.gpus > 1 and self.gpu is None

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
        o.cancel_fd = cancel_fd
        o.priority = self.priority
        o.expect_ms = self.expect_ms
        return o

    def _progress(self, o: N.Options, keep: list) -> Optional[_WaitLine]:
        quiet = self.quiet
        try:
            tty = sys.stderr is not None and sys.stderr.isatty()
        except (AttributeError, ValueError):
            tty = False
        line = None
        if quiet is False or (quiet is None and tty):
            line = _WaitLine(tty)
        user = self.on_progress
        if line is None and user is None:
            return None

        def report(p: Any, _u: Any) -> None:
            try:
                pr = p.contents
                holders = [_info_dict(pr.holders[k]) for k in range(pr.holder_count)]
                if line is not None:
                    line(pr.waited_ms, bool(pr.changed), holders)
                if user is not None:
                    user(WaitProgress(pr.waited_ms / 1000.0, bool(pr.changed), holders, pr.position or None))
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
            text = _s(message)

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
                user({"pid": req.pid, "label": _s(req.label or b""), "priority": req.priority})
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
            line = self._progress(o, keep) if progress else None
            self._lost(o, h)
            self._yield(o, h)
            if quick:
                # Reused by later quick attempts (the fast path of every
                # uncontended `with`): the struct and the bytes it points to.
                self._quick_options = (base, o, keep)
        out = ctypes.c_void_p()
        msg = getattr(_thread_owned, "msg", None)
        if msg is None:
            msg = _thread_owned.msg = ctypes.create_string_buffer(2048)
        try:
            rc = N.acquire_ex(ctypes.byref(o), ctypes.byref(out), msg, len(msg))
            err = N.last_errno()
        except BaseException:
            # KeyboardInterrupt can land as the call returns, with the lock
            # just taken: give it back rather than leave it held for the
            # life of the process.
            if out.value:
                N.release(out.value)
            raise
        finally:
            if line is not None:
                line.end()
        if rc != N.OK:
            raise _failure(rc, _s(msg.value), err, base)
        h._h = out.value
        h.path = os.fsdecode(N.path(out.value))
        h.token = _s(N.token(out.value))
        h.gpu = N.gpu(out.value)
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
            attempt = _Attempt()
            try:
                left = -1 if deadline is None else max(0, int((deadline - time.monotonic()) * 1000))
                return self._on_helper(base, left, attempt, True)
            finally:
                attempt.close()
        try:
            while True:
                _run_signal_handlers()  # one that came before the descriptor was ours
                left = -1 if deadline is None else max(0, int((deadline - time.monotonic()) * 1000))
                try:
                    return self._call(base, left, r, True)
                except _Cancelled:
                    _forward(_drain(r), old)
        finally:
            signal.set_wakeup_fd(old)
            _forward(_drain(r), old)

    def _on_helper(self, base: str, wait_ms: int, attempt: _Attempt, wait_here: bool) -> Handle:
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

    def _take(self, attempt_factory: Callable[[], _Attempt], in_helper: bool) -> Handle:
        """One acquisition, nesting and pass-through aside. in_helper: the
        calling thread is already a helper (asyncio); wait on it directly."""
        base = self._base()
        key = _canonical(base)
        wait = self.wait
        deadline = None if wait is None else time.monotonic() + wait
        gate: Optional[_Gate] = None
        placeholder = object()
        attempt: Optional[_Attempt] = None
        slot_key = ""
        try:
            if not self._any_slot():
                slot_key = _canonical(_gpu_slot_path(base, self.gpu or 0))
                cached = self._gate_cache
                if cached is not None and cached[0] == slot_key and cached[2] == _fork_generation[0]:
                    gate = cached[1]
                else:
                    gate = _gate_for(slot_key)
                    self._gate_cache = (slot_key, gate, _fork_generation[0])
                if not gate.try_claim(placeholder):
                    if wait == 0:
                        raise Busy(f"busy: {slot_key} is {_state_text(_inspect_one(slot_key, self.ttl_ms))}", base)
                    if in_helper:
                        attempt = attempt_factory()
                        attempt.gate = gate
                    if not gate.claim(placeholder, deadline, attempt, self.priority):
                        raise Timeout(
                            f"timed out: {slot_key} is {_state_text(_inspect_one(slot_key, self.ttl_ms))}", base
                        )
            owned = _owned_here()
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
                    if attempt is None:
                        attempt = attempt_factory()
                    h = self._call(base, left, attempt.r, True)
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
                        attempt = None
            if on_this_thread:
                owned.add(_canonical(h.path))
                h._owned_set = owned
                h._owned_key = _canonical(h.path)
        except BaseException:
            if gate is not None:
                gate.release(placeholder)
            raise
        h._key = key
        if gate is not None:
            h._gate = gate
            h._gate_owner = placeholder
        elif not h.inherited:
            g = _gate_for(_canonical(h.path))
            if g.try_claim(placeholder):
                h._gate = g
                h._gate_owner = placeholder
        if not h.inherited:
            _live.add(h)
            _export_env(h)
        return h

    def _enter_checks(self) -> Optional[Handle]:
        """A handle that passes straight through, or None to acquire."""
        held = _held.get()
        if not held and not _parent_held:
            return None
        key = _canonical(self._base())
        outer = held.get(key)
        if outer is not None and outer._state == _HELD:
            return _passthrough(outer)
        parent = _parent_held.get(key)
        if parent is not None:
            # Forked while the parent held this lock. The library's state
            # for it was copied mid-hold and cannot be used here: pass
            # through while the parent still holds it.
            if _token_holds(parent.path, parent.token):
                return _passthrough(parent, inherited=True)
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
        return self._take(_Attempt, in_helper=False)

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
            return quick._take(_Attempt, in_helper=False)
        except Busy:
            if self.wait == 0:
                raise
        loop = asyncio.get_running_loop()
        fut: asyncio.Future = loop.create_future()
        attempt = _Attempt()
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
            raise (LockError(str(e)) if isinstance(e, _Cancelled) else e)
        return cast(Handle, box["h"])

    def _push(self, h: Handle) -> None:
        held = _held.get()
        token = None
        if not h.nested:
            d = dict(held)
            d[h._key] = h
            token = _held.set(d)
        self._entered.set(self._entered.get() + ((h, token),))

    def _pop(self) -> Handle:
        stack = self._entered.get()
        h, token = stack[-1]
        self._entered.set(stack[:-1])
        if token is not None:
            try:
                _held.reset(token)
            except ValueError:  # exited in another context than entered
                d = dict(_held.get())
                d.pop(h._key, None)
                _held.set(d)
        return h

    def __enter__(self) -> Handle:
        h = self.acquire()
        self._push(h)
        return h

    def __exit__(self, *exc: Any) -> None:
        self._pop().release()

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


def _settle(fut: asyncio.Future) -> None:
    if not fut.done():
        fut.set_result(None)


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


def lock(
    path: Optional[Union[str, "os.PathLike[str]"]] = None,
    *,
    wait: Duration = None,
    label: Optional[str] = None,
    ttl: Duration = None,
    gpus: Optional[Union[int, str]] = None,
    gpu: Optional[int] = None,
    priority: Union[None, int, str] = None,
    expect: Duration = None,
    quiet: Optional[bool] = None,
    on_lost: Optional[Callable[[str], None]] = None,
    on_progress: Optional[Callable[[WaitProgress], None]] = None,
    on_yield: Optional[Callable[[Dict[str, Any]], None]] = None,
) -> Lock:
    """The machine-wide GPU lock, as a context manager and a decorator.

    ``path``: the lock directory; None: ``default_path()`` (``$GPU_LOCK``,
    else ``<tmpdir>/local-offload-gpu.lock``, the Node runners' rule),
    resolved at each acquisition. ``wait``: None (forever), 0 (try once),
    seconds, a timedelta or a DUR string as the CLI takes it (``"30m"``).
    ``label``: what holds it, shown by ``offload-lock status`` (default: the
    program's name). ``ttl``: how old another holder's meta.json may be
    before it counts as stale (default 1h). ``gpus=N`` (or ``"auto"``):
    take the first free of N GPU slots; ``gpu=K``: slot K only; the
    Handle's ``gpu`` says which. ``quiet``: None shows the CLI's wait line
    when stderr is a terminal, False shows it always, True never.
    ``on_progress(WaitProgress)``: called from a helper thread while
    waiting for another process, when the holder changes and every second.
    ``on_lost(message)``: called on a thread of its own as soon as someone
    else removes or replaces the lock while it is held.

    The queue: waiters of one lock (or one GPU slot) are served by
    ``priority``, highest first, then by arrival, whatever their language
    (the CLI's ``--priority``, the C++ library, Node, other Python
    processes, and the threads of this one). ``priority``: an integer from
    -100 to 100, or ``"batch"`` (-10), ``"normal"`` (0, the default) or
    ``"interactive"`` (10); anything else raises ValueError. Waits among
    several GPU slots (``gpus=N`` without ``gpu``) are not ordered.
    ``expect``: how long the hold should last (seconds, a timedelta or a
    DUR string), shown to others as ``expectMs`` and used for the ETAs of
    the waiters behind it; advisory, nothing happens when it passes.
    ``on_yield(request)``: this holder can make way. Called once per hold
    when a waiter of a higher priority queues, with that waiter's ``pid``,
    ``label`` and ``priority`` (a dict); afterwards the Handle's
    ``yield_requested()`` is True. It runs on the library's heartbeat
    thread (shared by every lock of the process), so it must return quickly
    and be thread-safe: set a flag or an Event and let the holder release
    from its own thread (and take the lock again if it has more to do: it
    then queues behind the waiter it made way for). Exceptions it raises
    are printed and otherwise ignored.

    Entering blocks until the lock is held, and raises Busy (wait 0),
    Timeout, OSError for system failures, KeyboardInterrupt on Ctrl-C
    (within milliseconds; nothing left behind). Leaving releases, also on
    an exception. A nested ``with`` of the same lock in the same thread or
    asyncio task passes straight through; so do child processes started
    while it is held (subprocess, multiprocessing spawn and fork,
    ProcessPoolExecutor), which never release it. The lock is released at
    interpreter exit and is stale at once when the process dies.
    """
    return Lock(
        path,
        wait=wait,
        label=label,
        ttl=ttl,
        gpus=gpus,
        gpu=gpu,
        priority=priority,
        expect=expect,
        quiet=quiet,
        on_lost=on_lost,
        on_progress=on_progress,
        on_yield=on_yield,
    )


def lock_async(
    path: Optional[Union[str, "os.PathLike[str]"]] = None,
    *,
    wait: Duration = None,
    label: Optional[str] = None,
    ttl: Duration = None,
    gpus: Optional[Union[int, str]] = None,
    gpu: Optional[int] = None,
    priority: Union[None, int, str] = None,
    expect: Duration = None,
    quiet: Optional[bool] = None,
    on_lost: Optional[Callable[[str], None]] = None,
    on_progress: Optional[Callable[[WaitProgress], None]] = None,
    on_yield: Optional[Callable[[Dict[str, Any]], None]] = None,
) -> Lock:
    """lock() for ``async with``: the same options and outcomes; the wait
    does not block the event loop, and cancelling the task ends it, leaving
    no lock and no waiter entry. Nesting is per asyncio task."""
    return lock(
        path,
        wait=wait,
        label=label,
        ttl=ttl,
        gpus=gpus,
        gpu=gpu,
        priority=priority,
        expect=expect,
        quiet=quiet,
        on_lost=on_lost,
        on_progress=on_progress,
        on_yield=on_yield,
    )


# ---- looking at the lock ----


def default_path() -> str:
    """The lock path when none is given: ``$GPU_LOCK`` if not empty, else
    ``<tmpdir>/local-offload-gpu.lock`` with tmpdir the first non-empty of
    TMPDIR, TMP, TEMP, else /tmp (the Node runners' rule)."""
    return Lock()._base()


def waiters(path: Optional[Union[str, "os.PathLike[str]"]] = None) -> List[Dict[str, Any]]:
    """The processes waiting for the lock in the order it serves them
    (priority, then arrival), as in ``offload-lock --json status``:
    ``pid``, ``label``, ``host``, ``since`` (epoch ms), ``waitedMs``,
    ``gpu`` (None: any slot), ``gpus``, ``position`` (1 = next in its
    slot's queue; None for a wait among several slots, which is not
    ordered), ``priority``, ``expectMs`` (None: undeclared) and ``etaMs``
    (the holder's expected free time plus the declared durations ahead of
    it; None as soon as one of them is undeclared). Dead waiters are left
    out. Never blocks."""
    p = os.fsencode(os.fspath(path)) if path is not None else None
    count = ctypes.c_size_t(0)
    n = 16
    while True:
        arr = (N.WaiterEx * n)()
        N.waiters_ex(p, arr, ctypes.sizeof(N.WaiterEx), n, ctypes.byref(count))
        if count.value <= n:
            break
        n = count.value + 8
    out = []
    for e in arr[: count.value]:
        w = e.waiter
        out.append(
            {
                "pid": w.pid,
                "label": _s(w.label) or None,
                "host": _s(w.host) or None,
                "since": w.since_ms,
                "waitedMs": w.waited_ms,
                "gpu": w.gpu if w.gpu >= 0 else None,
                "gpus": w.gpus,
                "position": e.position or None,
                "priority": e.priority,
                "expectMs": e.expect_ms or None,
                "etaMs": e.eta_ms if e.eta_ms >= 0 else None,
            }
        )
    return out


def _slot_count(base: str, ws: List[Dict[str, Any]]) -> int:
    # As `offload-lock status`: slots that exist next to the lock, and those
    # waiters ask for.
    parent, name = os.path.split(base)
    n = 1
    prefix = name + ".gpu"
    try:
        for e in os.listdir(parent or "."):
            k = e[len(prefix):]
            if e.startswith(prefix) and 0 < len(k) <= 4 and k.isdigit() and k[0] != "0":
                n = max(n, min(1024, int(k) + 1))
    except OSError:
        pass
    for w in ws:
        n = max(n, w["gpus"], (w["gpu"] if w["gpu"] is not None else -1) + 1)
    return n


def inspect(path: Optional[Union[str, "os.PathLike[str]"]] = None, *, ttl: Duration = None) -> Dict[str, Any]:
    """Who holds the lock and who waits, with the keys of ``offload-lock
    --json status``: slot 0's ``path``, ``held``, ``pid``, ``startedAt``,
    ``heldForMs``, ``label``, ``host``, ``token``, ``stale`` (None, or why a
    present lock is not held), ``ownerUid``, ``v1Stale``, ``otherPidNamespace``,
    ``gpu``, ``device`` (always None: nvidia-smi's view is the CLI's),
    ``priority`` (the holder's; None when not held), ``expectMs`` (its
    declared duration, None when undeclared), ``freeInMs`` (when it expects
    to be done: 0 when overdue or free, None when unknown),
    ``yieldRequested`` (None, or the ``pid``, ``label`` and ``priority`` of
    the waiter a holder that can yield is asked to make way for); ``slots``
    (one such dictionary per GPU slot that exists) and ``waiters`` (see
    waiters(), in serving order).
    Unknown values are None. Changes nothing; never blocks on the lock.
    Raises OSError when the lock cannot be looked at."""
    base = os.fspath(path) if path is not None else default_path()
    ttl_s = parse_duration(ttl, what="ttl") if ttl is not None else None
    ttl_ms = 0 if ttl_s is None else max(1, int(ttl_s * 1000))
    ws = waiters(base)
    slots = []
    for k in range(_slot_count(base, ws)):
        d, q = _inspect_both(_gpu_slot_path(base, k), ttl_ms)
        d["gpu"] = k
        # What nvidia-smi says of the GPU is the command's (`offload-lock
        # status`); the library does not run it, so it is None here.
        d["device"] = None
        d.update(q)
        slots.append(d)
    top = dict(slots[0])
    top["slots"] = slots
    top["waiters"] = ws
    return top
