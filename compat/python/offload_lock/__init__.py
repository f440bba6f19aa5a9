"""offload_lock: the machine-wide GPU lock for Python programs.

The same lock as the ``offload-lock`` command, the C++ library, the Node
runners' ``gpu-lock.mjs`` and the Go readers: a directory
(``<tmpdir>/local-offload-gpu.lock`` unless ``$GPU_LOCK`` says otherwise)
taken and released by the project's C++ library through its C API.

    import offload_lock

    with offload_lock.lock(label="train", wait="30m") as held:
        run_on_gpu()

See lock() for the contract; compat/python/README.md for installation.
"""

from ._lock import (
    Busy,
    Handle,
    Lock,
    LockError,
    Timeout,
    WaitProgress,
    default_path,
    inspect,
    lock,
    lock_async,
    parse_duration,
    parse_priority,
    waiters,
)
from ._native import library_path

__all__ = [
    "Busy",
    "Handle",
    "Lock",
    "LockError",
    "Timeout",
    "WaitProgress",
    "default_path",
    "inspect",
    "library_path",
    "lock",
    "lock_async",
    "parse_duration",
    "parse_priority",
    "waiters",
    "__version__",
]

__version__ = "0.2.0"
