"""The C API of liboffload_lock (include/offload_lock/offload_lock.h) through ctypes.

Where the library comes from, first match wins (see _library_candidates):

1. the file named by the environment variable ``OFFLOAD_LOCK_LIBRARY``
   (made absolute; it must exist);
2. ``liboffload_lock.so`` next to this file (the wheel bundles the one it was
   built with);
3. in a source checkout (this file in compat/python/offload_lock of a tree
   that has include/offload_lock/offload_lock.h), that tree's build
   directory: ``$BUILD_DIR`` when it is an absolute path, else ``build``
   under the tree's root (a relative ``$BUILD_DIR`` is taken from the
   root too, never from the current directory);
4. the system loader, by the installed soname (``liboffload_lock.so.0.2``:
   the minor version names the ABI, as ``cmake --install`` installs it).

No candidate is ever looked up relative to the current directory, so a
library planted there is never loaded.
"""

from __future__ import annotations

import ctypes
import os
from typing import Any, Callable, List, Optional

OK = 0
BUSY = 1
TIMED_OUT = 2
LOST = 3
ERROR = 4
INVALID = 5
CANCELLED = 6

NO_INHERIT = 1
NO_REGISTER = 2


class InfoEx(ctypes.Structure):
    _fields_ = [
        ("path", ctypes.c_char * 4096),
        ("present", ctypes.c_int),
        ("held", ctypes.c_int),
        ("has_pid", ctypes.c_int),
        ("pid", ctypes.c_int64),
        ("has_started_at", ctypes.c_int),
        ("started_at_ms", ctypes.c_int64),
        ("held_for_ms", ctypes.c_int64),
        ("age_ms", ctypes.c_int64),
        ("owner_uid", ctypes.c_int64),
        ("has_stale", ctypes.c_int),
        ("node_stale", ctypes.c_int),
        ("go_held", ctypes.c_int),
        ("label", ctypes.c_char * 1024),
        ("host", ctypes.c_char * 256),
        ("token", ctypes.c_char * 129),
        ("tool", ctypes.c_char * 128),
        ("stale", ctypes.c_char * 1024),
        ("problem", ctypes.c_char * 1024),
        ("other_pid_namespace", ctypes.c_int),
        ("has_v1_stale", ctypes.c_int),
        ("v1_stale", ctypes.c_char * 1024),
    ]


class Progress(ctypes.Structure):
    _fields_ = [
        ("waited_ms", ctypes.c_int64),
        ("changed", ctypes.c_int),
        ("holder_count", ctypes.c_size_t),
        ("holders", ctypes.POINTER(InfoEx)),
        ("position", ctypes.c_int),
        ("lease", ctypes.c_void_p),
    ]


class YieldRequest(ctypes.Structure):
    _fields_ = [
        ("pid", ctypes.c_int64),
        ("label", ctypes.c_char_p),
        ("priority", ctypes.c_int),
    ]


class QueueInfo(ctypes.Structure):
    _fields_ = [
        ("size", ctypes.c_size_t),
        ("priority", ctypes.c_int),
        ("expect_ms", ctypes.c_int64),
        ("free_in_ms", ctypes.c_int64),
        ("can_yield", ctypes.c_int),
        ("has_yield_request", ctypes.c_int),
        ("yield_pid", ctypes.c_int64),
        ("yield_priority", ctypes.c_int),
        ("yield_label", ctypes.c_char * 1024),
        ("max_hold_ms", ctypes.c_int64),
        ("max_hold_in_ms", ctypes.c_int64),
        ("idle_since_ms", ctypes.c_int64),
        ("idle_for_ms", ctypes.c_int64),
        ("fence", ctypes.c_uint64),
    ]


PROGRESS_FN = ctypes.CFUNCTYPE(None, ctypes.POINTER(Progress), ctypes.c_void_p)
LOST_FN = ctypes.CFUNCTYPE(None, ctypes.c_char_p, ctypes.c_void_p)
YIELD_FN = ctypes.CFUNCTYPE(None, ctypes.POINTER(YieldRequest), ctypes.c_void_p)


class Options(ctypes.Structure):
    _fields_ = [
        ("size", ctypes.c_size_t),
        ("path", ctypes.c_char_p),
        ("wait_ms", ctypes.c_int64),
        ("label", ctypes.c_char_p),
        ("ttl_ms", ctypes.c_int64),
        ("gpus", ctypes.c_int),
        ("gpu", ctypes.c_int),
        ("cancel_fd", ctypes.c_int),
        ("flags", ctypes.c_uint),
        ("progress_every_ms", ctypes.c_int64),
        ("on_progress", PROGRESS_FN),
        ("progress_user", ctypes.c_void_p),
        ("on_lost", LOST_FN),
        ("lost_user", ctypes.c_void_p),
        ("priority", ctypes.c_int),
        ("expect_ms", ctypes.c_int64),
        ("on_yield", YIELD_FN),
        ("yield_user", ctypes.c_void_p),
        ("allowed_gpus", ctypes.POINTER(ctypes.c_int)),
        ("allowed_gpu_count", ctypes.c_size_t),
        ("max_hold_ms", ctypes.c_int64),
        ("lease_class", ctypes.c_char_p),
    ]


class Waiter(ctypes.Structure):
    _fields_ = [
        ("pid", ctypes.c_int64),
        ("since_ms", ctypes.c_int64),
        ("waited_ms", ctypes.c_int64),
        ("gpu", ctypes.c_int),
        ("gpus", ctypes.c_int),
        ("label", ctypes.c_char * 1024),
        ("host", ctypes.c_char * 256),
    ]


class WaiterEx(ctypes.Structure):
    _fields_ = [
        ("waiter", Waiter),
        ("priority", ctypes.c_int),
        ("expect_ms", ctypes.c_int64),
        ("position", ctypes.c_int),
        ("eta_ms", ctypes.c_int64),
    ]


# The soname the library is installed under: its version's major.minor
# (CMakeLists.txt: SOVERSION), the same as this package's.
VERSION = "0.2.0"
SONAME = "liboffload_lock.so." + ".".join(VERSION.split(".")[:2])


def _library_candidates() -> List[str]:
    """Where to look, in order; every entry is absolute or a bare soname."""
    found: List[str] = []
    env = os.environ.get("OFFLOAD_LOCK_LIBRARY")
    if env:
        found.append(os.path.abspath(env))
    pkg = os.path.dirname(os.path.abspath(__file__))
    found.append(os.path.join(pkg, "liboffload_lock.so"))
    root = os.path.dirname(os.path.dirname(os.path.dirname(pkg)))
    if os.path.isfile(os.path.join(root, "include", "offload_lock", "offload_lock.h")):
        build = os.environ.get("BUILD_DIR") or "build"
        found.append(os.path.join(root, build, "liboffload_lock.so"))  # join keeps an absolute BUILD_DIR
    found.append(SONAME)
    return found


def _load() -> ctypes.CDLL:
    errors = []
    env = os.environ.get("OFFLOAD_LOCK_LIBRARY")
    for name in _library_candidates():
        if os.path.isabs(name) and not os.path.exists(name):
            if env and name == os.path.abspath(env):
                # Named explicitly: its absence is the error, not a reason to
                # load some other library instead.
                raise ImportError(f"offload_lock: OFFLOAD_LOCK_LIBRARY={env}: no such file")
            continue
        try:
            return ctypes.CDLL(name)
        except OSError as e:
            errors.append(f"{name}: {e}")
    raise ImportError(
        "offload_lock: cannot load liboffload_lock (set OFFLOAD_LOCK_LIBRARY to its path, install it with "
        f"cmake --install so that the loader finds {SONAME}, or reinstall this package from a tree where "
        "scripts/build has run): " + "; ".join(errors)
    )


lib = _load()
library_path: Optional[str] = getattr(lib, "_name", None)

_H = ctypes.c_void_p


def _fn(name, restype, *argtypes):
    f = getattr(lib, name)
    f.restype = restype
    f.argtypes = list(argtypes)
    return f


_options_init_sized = _fn("offload_lock_options_init_sized", None, ctypes.POINTER(Options), ctypes.c_size_t)


def options_init(o: Any) -> None:
    """Fills an Options (a byref) with the library's defaults, writing no
    more than this struct declares."""
    _options_init_sized(o, ctypes.sizeof(Options))
acquire_ex = _fn(
    "offload_lock_acquire_ex", ctypes.c_int, ctypes.POINTER(Options), ctypes.POINTER(_H), ctypes.c_char_p, ctypes.c_size_t
)
release = _fn("offload_lock_release", ctypes.c_int, _H)
token = _fn("offload_lock_token", ctypes.c_char_p, _H)
path = _fn("offload_lock_path", ctypes.c_char_p, _H)
gpu = _fn("offload_lock_gpu", ctypes.c_int, _H)
nested = _fn("offload_lock_nested", ctypes.c_int, _H)
inherited = _fn("offload_lock_inherited", ctypes.c_int, _H)
still_held = _fn("offload_lock_still_held", ctypes.c_int, _H)
yield_requested = _fn("offload_lock_yield_requested", ctypes.c_int, _H)
fence = _fn("offload_lock_fence", ctypes.c_uint64, _H)
child_environment = _fn("offload_lock_child_environment", ctypes.c_size_t, _H, ctypes.c_char_p, ctypes.c_size_t)
default_path = _fn("offload_lock_default_path", ctypes.c_size_t, ctypes.c_char_p, ctypes.c_size_t)
inspect_ex = _fn("offload_lock_inspect_ex", ctypes.c_int, ctypes.c_char_p, ctypes.c_int64, ctypes.POINTER(InfoEx))
inspect_queue = _fn(
    "offload_lock_inspect_queue", ctypes.c_int, ctypes.c_char_p, ctypes.c_int64, ctypes.POINTER(InfoEx),
    ctypes.POINTER(QueueInfo),
)
waiters_ex = _fn(
    "offload_lock_waiters_ex", ctypes.c_int, ctypes.c_char_p, ctypes.POINTER(WaiterEx), ctypes.c_size_t,
    ctypes.c_size_t, ctypes.POINTER(ctypes.c_size_t),
)
last_errno = _fn("offload_lock_last_errno", ctypes.c_int)
version = _fn("offload_lock_version", ctypes.c_char_p)
describe_duration_c = _fn("offload_lock_describe_duration", ctypes.c_size_t, ctypes.c_int64, ctypes.c_char_p, ctypes.c_size_t)

# The command's grammar and words (since 0.3): _words.py wraps them.
parse_duration_c = _fn("offload_lock_parse_duration", ctypes.c_int, ctypes.c_char_p, ctypes.POINTER(ctypes.c_int64))
parse_priority_c = _fn("offload_lock_parse_priority", ctypes.c_int, ctypes.c_char_p, ctypes.POINTER(ctypes.c_int))
gpu_slot_path = _fn("offload_lock_gpu_slot_path", ctypes.c_size_t, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p,
                    ctypes.c_size_t)
lock_identity = _fn("offload_lock_lock_identity", ctypes.c_size_t, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_size_t)
gpu_count = _fn("offload_lock_gpu_count", ctypes.c_int)
slot_count = _fn("offload_lock_slot_count", ctypes.c_int, ctypes.c_char_p)
visible_gpus = _fn("offload_lock_visible_gpus", ctypes.c_int, ctypes.c_char_p, ctypes.POINTER(ctypes.c_int),
                   ctypes.c_size_t, ctypes.c_char_p, ctypes.c_size_t)
choose_slots = _fn("offload_lock_choose_slots", ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_char_p,
                   ctypes.POINTER(ctypes.c_int), ctypes.POINTER(ctypes.c_int), ctypes.c_size_t,
                   ctypes.POINTER(ctypes.c_int), ctypes.c_char_p, ctypes.c_size_t)
describe_holder = _fn("offload_lock_describe_holder", ctypes.c_size_t, ctypes.POINTER(InfoEx), ctypes.c_char_p,
                      ctypes.c_size_t)
describe_state = _fn("offload_lock_describe_state", ctypes.c_size_t, ctypes.POINTER(InfoEx), ctypes.c_char_p,
                     ctypes.c_size_t)
describe_wait = _fn("offload_lock_describe_wait", ctypes.c_size_t, ctypes.POINTER(Progress), ctypes.c_char_p,
                    ctypes.c_char_p, ctypes.c_size_t)


def text_of(call: Callable[..., int], *args: Any) -> bytes:
    """The bytes of a C API call that fills a buffer and returns the size it
    needs (``call(*args, buf, len)``): sized first, then filled."""
    buf = ctypes.create_string_buffer(256)
    n = call(*args, buf, len(buf))
    if n >= len(buf):
        buf = ctypes.create_string_buffer(n + 1)
        n = call(*args, buf, len(buf))
    return buf.raw[:n]

