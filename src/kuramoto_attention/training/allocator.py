"""Process memory settings for the ``kuramoto`` command: keep freed memory instead of returning it to the OS.

glibc's malloc serves large blocks with ``mmap`` and hands them back on ``free``, and trims the top of its heap
when enough of it is free. A training step allocates and frees the same large activations every step, so
every step then faults the same memory back in page by page (and the kernel zeroes each page). Ad-hoc
measurements on the 2-core CPU of BENCHMARKS.md (scripts not kept): an eager bf16 ka-5m step alone in its process
took 22,500 minor page faults (tf-5m 7,900); with ka and tf alternating in one process as ``python -m benchmarks`` runs
them, ka-5m's fp32 step took 14,400 and tf's none, and keeping freed memory moved that ka/tf ratio from 0.81 to
0.85 (bf16: no faults either way there). With a fixed 32 MiB mmap threshold (glibc's largest) and no trimming,
the freed blocks stay in the heap and are reused: the process keeps its peak, which it needs again next step
anyway. ``python -m benchmarks`` records each model's faults per step under the setting it ran with.

This is process-wide state, so the library never sets it: the command-line entry point does, once, and
``KURAMOTO_MALLOC=default`` (or glibc's own ``MALLOC_*_`` variables) leaves malloc alone.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import platform
import resource

from kuramoto_attention.errors import ConfigError

# mallopt parameter numbers (malloc.h)
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
MMAP_THRESHOLD = 32 * 2**20  # glibc's maximum on 64-bit (HEAP_MAX_SIZE / 2); larger blocks are still mmapped
NO_TRIM = 2**31 - 1  # mallopt takes an int: the largest is "never trim" in practice
ENV = "KURAMOTO_MALLOC"
GLIBC_ENV = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_")


def keep_freed_memory() -> str:
    """Set glibc malloc to keep freed memory (see the module doc); returns what was done, in words.

    ``KURAMOTO_MALLOC``: "keep" (default) or "default" (leave malloc as it is).
    """
    choice = os.environ.get(ENV, "keep")
    if choice not in ("keep", "default"):
        raise ConfigError(f"{ENV} must be 'keep' or 'default', got {choice!r}")
    if choice == "default":
        return f"malloc unchanged ({ENV}=default)"
    if any(name in os.environ for name in GLIBC_ENV):
        return "malloc as set by the environment's MALLOC_*_ variables"
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return "malloc unchanged (not glibc)"
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    ok = libc.mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD) == 1 and libc.mallopt(M_TRIM_THRESHOLD, NO_TRIM) == 1
    if not ok:
        return "malloc unchanged (mallopt refused)"
    mib = MMAP_THRESHOLD // 2**20
    return f"glibc malloc keeps freed memory (mmap threshold {mib} MiB, no trim; {ENV}=default: off)"


def minor_faults() -> int:
    """Minor page faults of this process so far (memory the kernel had to map in, e.g. freshly allocated)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt
