"""The command's grammar and words, from the C library: durations and
priorities parsed as ``offload-lock`` parses them, slot paths, lock
identity, GPU discovery, and the sentences naming a holder, a state and a
wait. Nothing here re-implements a rule: each function is one C API call."""

from __future__ import annotations

import ctypes
import os
from datetime import timedelta
from typing import Any, Dict, List, Mapping, Optional, Tuple, Union

from . import _native as N

Duration = Union[None, int, float, str, timedelta]


def _named_priority(name: str) -> int:
    out = ctypes.c_int(0)
    N.parse_priority_c(name.encode(), ctypes.byref(out))
    return out.value


# The named priorities, as the library reads them.
PRIORITY_NAMES: Mapping[str, int] = {n: _named_priority(n) for n in ("batch", "normal", "interactive")}

_DUR_HELP = "0, seconds such as 1.5, 500ms, 42s, 5m, 2h, 1d, a compound such as 1h30m, or forever"


def parse_duration(value: Duration, *, what: str = "wait", allow_forever: bool = True) -> Optional[float]:
    """Seconds from a wait, TTL or declared duration.

    A string is read by the command's own grammar (the C library's
    ``offload_lock_parse_duration``): ``0``, seconds (``1.5``), a number
    with ``ms``, ``s``, ``m``, ``h`` or ``d``, a compound such as
    ``1h30m``, ``2m30s`` or ``1d12h``, or ``forever``; no signs, no spaces.
    A number is seconds; a ``timedelta`` is taken as is. ``None`` and
    ``forever`` mean no limit (None is returned) unless ``allow_forever`` is
    False. Negative values and anything else raise ``ValueError``
    (``TypeError`` for bools and other types)."""
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
        ms = ctypes.c_int64(0)
        if N.parse_duration_c(value.encode("utf-8", "replace"), ctypes.byref(ms)) != N.OK:
            raise ValueError(f"{what}: {value!r} is not a duration ({_DUR_HELP})")
        if ms.value < 0:  # forever
            if allow_forever:
                return None
            raise ValueError(f"{what}: 'forever' is not allowed here")
        return ms.value / 1000.0
    else:
        raise TypeError(f"{what}: a number of seconds, a duration string or a timedelta, not {type(value).__name__}")
    if seconds != seconds or seconds < 0:
        raise ValueError(f"{what}: {value!r} is negative")
    if seconds == float("inf"):
        return None if allow_forever else float("inf")
    return seconds


def describe_duration(ms: int) -> str:
    """A duration as the command shows it: ``850ms``, ``42s``, ``5m12s``,
    ``2h03m``."""
    return N.text_of(N.describe_duration_c, int(ms)).decode()


def parse_priority(value: Union[None, int, str]) -> int:
    """A queue priority as the command's ``--priority`` takes it: an integer
    from -100 to 100 (higher is served first; written without ``+`` or
    spaces when a string), or ``"batch"`` (-10), ``"normal"`` (0, also for
    None) or ``"interactive"`` (10). Anything else raises ``ValueError``
    naming the value."""
    if value is None:
        return PRIORITY_NAMES["normal"]
    text: Optional[bytes] = None
    if isinstance(value, str):
        text = value.encode("utf-8", "replace")
    elif isinstance(value, int) and not isinstance(value, bool):
        text = str(value).encode()
    out = ctypes.c_int(0)
    if text is None or N.parse_priority_c(text, ctypes.byref(out)) != N.OK:
        raise ValueError(
            f"priority: {value!r} (an integer from -100 to 100, or 'batch', 'normal', 'interactive')"
        )
    return out.value


def gpu_slot_path(base: str, gpu: int) -> str:
    """The lock path of GPU slot ``gpu`` of the lock at ``base``."""
    return os.fsdecode(N.text_of(N.gpu_slot_path, os.fsencode(base), int(gpu)))


_identity_cache: Dict[str, str] = {}


def lock_identity(path: str) -> str:
    """One name per lock directory, whatever path reaches it (the library's:
    device and inode of the parent, and the last component). Remembered per
    path given, so the fast path of an uncontended ``with`` costs no system
    call; a directory moved while the process runs keeps its first name."""
    c = _identity_cache.get(path)
    if c is None:
        c = os.fsdecode(N.text_of(N.lock_identity, os.fsencode(path)))
        if len(_identity_cache) > 256:
            _identity_cache.clear()
        _identity_cache[path] = c
    return c


def gpu_count() -> int:
    """How many GPUs this machine has, as ``--gpus auto`` counts them
    (nvidia-smi, else the driver's entries); 0 when none are found."""
    return int(N.gpu_count())


def slot_count(path: str) -> int:
    """How many GPU slots exist beside the lock at ``path`` (at least 1)."""
    return int(N.slot_count(os.fsencode(path)))


def visible_gpus(value: Optional[str] = None) -> Tuple[Optional[List[int]], str]:
    """The GPU slots a ``CUDA_VISIBLE_DEVICES`` value allows (None: this
    process's), read as CUDA and the command read it, and the first entry
    that names no GPU ("" when none). The list is None when the variable is
    unset: every GPU is allowed."""
    cap = 1024
    out = (ctypes.c_int * cap)()
    ignored = ctypes.create_string_buffer(256)
    v = None if value is None else value.encode("utf-8", "replace")
    n = N.visible_gpus(v, out, cap, ignored, len(ignored))
    text = ignored.value.decode("utf-8", "replace")
    if n < 0:
        return None, text
    return [out[k] for k in range(min(n, cap))], text


def choose_slots(gpus: int, gpu: Optional[int], value: Optional[str] = None) -> Tuple[Optional[int], Optional[List[int]], str]:
    """The GPU slots of ``gpus`` an acquisition of this process may take, as
    the command chooses them: under ``CUDA_VISIBLE_DEVICES`` (``value``;
    None: this process's) only the slots of the GPUs it names. Returns the
    one slot to take (None: any allowed), the slots allowed (None: every
    one) and an entry CUDA ignores, to say once ("" when none). Raises
    ValueError, one line, when the value allows none of them."""
    cap = 1024
    allowed = (ctypes.c_int * cap)()
    slot, n = ctypes.c_int(-1), ctypes.c_int(-1)
    note = ctypes.create_string_buffer(1024)
    v = None if value is None else value.encode("utf-8", "replace")
    rc = N.choose_slots(gpus, -1 if gpu is None else gpu, v, ctypes.byref(slot), allowed, cap, ctypes.byref(n),
                        note, len(note))
    text = note.value.decode("utf-8", "replace")
    if rc != N.OK:
        raise ValueError(text or f"gpus: {gpus!r}, gpu: {gpu!r}")
    return (None if slot.value < 0 else slot.value,
            None if n.value < 0 else [allowed[k] for k in range(min(n.value, cap))], text)


def _info_struct(h: Mapping[str, Any]) -> N.InfoEx:
    """A dictionary of inspect() back into the C struct the words read."""
    i = N.InfoEx()
    i.path = os.fsencode(h.get("path") or "")[:4095]
    i.held = 1 if h.get("held") else 0
    i.present = 1 if (h.get("held") or h.get("stale") is not None or h.get("pid") is not None
                      or h.get("token") is not None) else 0
    if h.get("pid") is not None:
        i.has_pid, i.pid = 1, int(h["pid"])
    i.held_for_ms = int(h.get("heldForMs") or 0)
    i.label = (h.get("label") or "").encode("utf-8", "replace")[:1023]
    i.host = (h.get("host") or "").encode("utf-8", "replace")[:255]
    if h.get("stale") is not None:
        i.has_stale, i.stale = 1, str(h["stale"]).encode("utf-8", "replace")[:1023]
    return i


def describe_holder(h: Mapping[str, Any]) -> str:
    """``LABEL (pid N, host H)`` for a lock as inspect() gives it, named as
    the command names it (an unlabelled v1 holder by its process's name)."""
    return N.text_of(N.describe_holder, ctypes.byref(_info_struct(h))).decode("utf-8", "replace")


def describe_state(h: Mapping[str, Any]) -> str:
    """``held by HOLDER for 5m12s``, ``free``, or ``free (stale lock of
    HOLDER: REASON)``, as ``offload-lock status`` says it."""
    return N.text_of(N.describe_state, ctypes.byref(_info_struct(h))).decode("utf-8", "replace")


def describe_wait(progress: Any, base: str) -> str:
    """What a wait is for, as the command's waiting line says it: the
    holder, and this waiter's place and ETA (``; #2 in line, ETA ~20m``).
    ``progress`` is the C API's offload_lock_progress (a pointer), inside
    on_progress."""
    return N.text_of(N.describe_wait, progress, os.fsencode(base)).decode("utf-8", "replace")
