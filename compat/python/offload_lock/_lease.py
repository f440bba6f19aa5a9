"""The gpulease lease of current upstream runners, through the C API
(offload_lock_lease_find, offload_lock_lease_inspect): where it lives and who
holds it, judged by gpulease's own rules. Read-only. See
doc/protocol-gpulease.md."""

from __future__ import annotations

import ctypes
import os
from typing import Any, Dict, Optional, Tuple, Union

from . import _native as N

_STATES = {0: "free", 1: "held", 2: "stale", 3: "unknown"}


class _Place(ctypes.Structure):
    _fields_ = [
        ("dir", ctypes.c_char * 4096),
        ("gpu_dir", ctypes.c_char * 4096),
        ("root", ctypes.c_char * 4096),
        ("rule", ctypes.c_char * 32),
        ("exists", ctypes.c_int),
        ("refused", ctypes.c_char * 256),
    ]


class _Info(ctypes.Structure):
    _fields_ = [
        ("dir", ctypes.c_char * 4096),
        ("state", ctypes.c_int),
        ("in_progress", ctypes.c_int),
        ("readers_held", ctypes.c_int),
        ("pid", ctypes.c_int64),
        ("lease_class", ctypes.c_char * 32),
        ("epoch", ctypes.c_uint64),
        ("reason", ctypes.c_char * 1024),
        ("origin", ctypes.c_char * 256),
        ("job_id", ctypes.c_char * 256),
        ("acquired_at_ms", ctypes.c_int64),
        ("expires_at_ms", ctypes.c_int64),
        ("renewed_at_ms", ctypes.c_int64),
        ("held_for_ms", ctypes.c_int64),
        ("has_counter", ctypes.c_int),
        ("counter", ctypes.c_uint64),
        ("why", ctypes.c_char * 1024),
    ]


_find = N._fn("offload_lock_lease_find", ctypes.c_int, ctypes.c_char_p, ctypes.POINTER(_Place))
_inspect = N._fn("offload_lock_lease_inspect", ctypes.c_int, ctypes.c_char_p, ctypes.POINTER(_Info))
_joined = N._fn(
    "offload_lock_lease_joined", ctypes.c_int, ctypes.POINTER(_Info), ctypes.POINTER(ctypes.c_int), ctypes.POINTER(ctypes.c_int)
)


def _s(b: bytes) -> str:
    return b.decode("utf-8", "replace")


def find_lease(directory: Optional[Union[str, "os.PathLike[str]"]] = None) -> Dict[str, Any]:
    """Where the gpulease lease lives: ``dir`` (the lease directory),
    ``gpuDir`` (its parent, where the fencing counter is), ``root`` (the
    state root, "" for GPU_LOCK), ``rule`` (which of "explicit", "GPU_LOCK",
    "OFFLOAD_LOCK_LEASE_ROOT", "LOCAL_OFFLOAD_STATE_DIR", "default" placed
    it), ``exists`` (a gpulease root exists, so gpulease participants can
    run), ``refused`` (why gpulease refuses the path, or None). From the
    environment unless ``directory`` names the lease directory. Never
    creates anything."""
    p = _Place()
    arg = os.fsencode(directory) if directory is not None else None
    if _find(arg, ctypes.byref(p)) != N.OK:
        raise ValueError("offload_lock: cannot place the gpulease lease")
    refused = _s(p.refused)
    return {
        "dir": _s(p.dir),
        "gpuDir": _s(p.gpu_dir),
        "root": _s(p.root),
        "rule": _s(p.rule),
        "exists": bool(p.exists),
        "refused": refused or None,
    }


def _info_dict(i: _Info) -> Dict[str, Any]:
    state = _STATES.get(i.state, "unknown")
    cls = _s(i.lease_class)
    claim = i.epoch != 0 or i.pid != 0 or cls != ""

    def holder(v: Any) -> Any:
        return v if claim else None

    return {
        "dir": _s(i.dir),
        "state": state,
        "held": state == "held",
        "why": _s(i.why),
        "inProgress": bool(i.in_progress),
        "pid": holder(i.pid),
        "class": holder(cls),
        "epoch": holder(i.epoch),
        "reason": _s(i.reason),
        "origin": _s(i.origin),
        "jobId": _s(i.job_id),
        "acquiredAtMs": holder(i.acquired_at_ms),
        "expiresAtMs": holder(i.expires_at_ms),
        "renewedAtMs": holder(i.renewed_at_ms),
        "heldForMs": i.held_for_ms if state == "held" and claim else None,
        "gpuleaseReadersHeld": bool(i.readers_held),
        "counter": i.counter if i.has_counter else None,
    }


def inspect_lease(directory: Optional[Union[str, "os.PathLike[str]"]] = None) -> Dict[str, Any]:
    """Who holds the gpulease lease, with the keys of the ``gpulease`` object
    of ``offload-lock --json status``: ``dir``, ``state`` ("free", "held",
    "stale", "unknown"), ``held``, ``why``, ``inProgress``, ``pid``,
    ``class``, ``epoch``, ``reason``, ``origin``, ``jobId``,
    ``acquiredAtMs``, ``expiresAtMs`` (the end of the holder's declared
    window), ``renewedAtMs`` (its last heartbeat), ``heldForMs``,
    ``gpuleaseReadersHeld`` (what gpulease's own readers conclude) and
    ``counter`` (the last epoch issued); holder values are None without a
    parseable claim. The lease directory is ``directory``, else where
    find_lease() places it. Changes nothing; never blocks on the lease."""
    i = _Info()
    arg = os.fsencode(directory) if directory is not None else None
    if _inspect(arg, ctypes.byref(i)) != N.OK:
        raise ValueError("offload_lock: cannot inspect the gpulease lease")
    return _info_dict(i)


def joined_lease() -> Tuple[Optional[Dict[str, Any]], bool]:
    """The lease offload-lock's acquisitions of a plain lock (or of GPU slot
    0) also take, judged now, as inspect_lease() gives it, or None where
    they take none (no gpulease state root, GPU_LOCK placing the lease, a
    path gpulease refuses); and whether it keeps the GPU busy (held, or
    unknown: never taken over), whatever the lock says. The library's
    rule (offload_lock_lease_joined), the one `offload-lock status` and
    `wait-free` follow."""
    i = _Info()
    joined = ctypes.c_int(0)
    busy = ctypes.c_int(0)
    if _joined(ctypes.byref(i), ctypes.byref(joined), ctypes.byref(busy)) != N.OK:
        raise ValueError("offload_lock: cannot look at the gpulease lease")
    return (_info_dict(i) if joined.value else None), bool(busy.value)


def lease_board() -> Optional[Dict[str, Any]]:
    """The ``gpulease`` member of ``offload-lock --json status`` (and of
    inspect()): inspect_lease() of where find_lease() places the lease,
    with its ``rule`` second; None where no gpulease root exists."""
    place = find_lease()
    if not place["exists"]:
        return None
    info = inspect_lease(place["dir"])
    board = {"dir": info.pop("dir"), "rule": place["rule"]}
    board.update(info)
    return board
