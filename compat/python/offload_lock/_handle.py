"""Handle: a held lock, and what lives as long as it does: the environment
child processes inherit (B11), the nesting of one thread or asyncio task,
the release at interpreter exit, and what a forked child may do."""

from __future__ import annotations

import atexit
import contextvars
import ctypes
import errno as _errno
import os
import threading
import weakref
from typing import Any, Dict, Mapping, Optional

from . import _native as N
from ._inspect import token_holds


# The slot keys whose library-level acquisition was made on this OS thread.
# The library treats another acquisition of the same lock from the same
# thread as nested; when the Python-level nesting says it is not (another
# asyncio task, another context), the call goes to a helper thread instead.
thread_owned = threading.local()


def owned_here() -> set:
    s = getattr(thread_owned, "keys", None)
    if s is None:
        s = set()
        thread_owned.keys = s
    return s


_HELD, _RELEASING, _RELEASED = 0, 1, 2


class Handle:
    """A held lock. ``path`` is the lock (or GPU slot) directory held,
    ``token`` its token, ``gpu`` the slot, ``fence`` an etcd lock's fencing
    token (the etcd revision at which it was taken; 0 for a local lock).
    ``nested`` is True for a lock this
    thread or task already held (it passes straight through), ``inherited``
    for the parent process's lock passed down to this one; releasing either
    leaves the lock alone.

    Thread safety: release() may be called from any thread, once or more;
    the first call releases.
    """

    __slots__ = (
        "path", "token", "gpu", "fence", "nested", "inherited", "_h", "_pid", "_outer", "_state", "_mu", "_lost_cb", "_yield_cb",
        "_env_saved", "_env_set", "_owned_set", "_owned_key", "_key", "__weakref__",
    )

    def __init__(self) -> None:
        self.path = ""
        self.token = ""
        self.gpu = 0
        self.fence = 0
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
            return token_holds(self.path, self.token)
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
            restore_env(self)
            live.discard(self)
            if self._owned_set is not None:
                self._owned_set.discard(self._owned_key)
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


# Every handle this process holds in the library, for release at exit.
live: "weakref.WeakSet[Handle]" = weakref.WeakSet()


def _release_all_at_exit() -> None:
    for h in list(live):
        try:
            if os.getpid() == h._pid:
                h.release()
        except Exception:
            pass


atexit.register(_release_all_at_exit)


# ---- the environment children inherit (B11) ----

_ENV_KEYS = ("OFFLOAD_LOCK_PATH", "OFFLOAD_LOCK_TOKEN")
_env_mu = threading.Lock()


def export_env(h: Handle) -> None:
    # What the library's child_environment() gives for a lock held here:
    # the directory held and its token.
    env = {"OFFLOAD_LOCK_PATH": h.path, "OFFLOAD_LOCK_TOKEN": h.token}
    with _env_mu:
        environ = os.environ
        h._env_saved = {k: environ.get(k) for k in _ENV_KEYS}
        h._env_set = env
        environ.update(env)


def restore_env(h: Handle) -> None:
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
held_locks: "contextvars.ContextVar[Mapping[str, Handle]]" = contextvars.ContextVar("offload_lock_held", default={})

# In a process forked while this one held locks: canonical base path -> the
# parent's handle, for locks the parent held at the fork.
parent_held: Dict[str, Handle] = {}


def _after_fork_in_child() -> None:
    global _env_mu
    _env_mu = threading.Lock()
    thread_owned.keys = set()
    for h in list(live):
        parent_held[h._key] = h
    live.clear()


os.register_at_fork(after_in_child=_after_fork_in_child)


def passthrough(outer: Handle, inherited: bool = False) -> Handle:
    h = Handle()
    h.path, h.token, h.gpu, h.fence = outer.path, outer.token, outer.gpu, outer.fence
    h.nested = not inherited
    h.inherited = inherited
    h._outer = outer
    h._key = outer._key
    return h


