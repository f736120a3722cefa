"""Keep a long-lived worker's C heap from holding memory it freed: a fixed mmap threshold and few malloc arenas.

A trajectory actor searches from several threads at once (its trajectories' tool calls, the BM25 threads), and each
search allocates and frees large arrays (the scorer's per-document scores, 4 MB at 1M documents, its top-k
buffers, the hits' lists). glibc's malloc serves a thread from its own arena (up to 8 per core) and, after the
first large block is freed, raises its mmap threshold (up to 32 MB), so the next large blocks come from the arenas'
heaps instead of fresh mappings; freed, they stay in each arena as private dirty memory the process never gives
back. A fixed threshold (a block of 256 KiB or more is its own mapping, returned to the kernel when freed) and at
most two arenas keep that memory at what the searches hold at the moment, not at the peak of every thread's past.
Nothing here changes an answer; on a libc other than glibc it does nothing.
"""

from __future__ import annotations

import ctypes
import logging
import platform

log = logging.getLogger(__name__)

_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD, _M_ARENA_MAX = -1, -3, -8  # glibc's mallopt parameters (malloc.h)
MMAP_THRESHOLD = 256 * 1024
TRIM_THRESHOLD = 1 << 20
ARENA_MAX = 2
_libc: ctypes.CDLL | None | bool = None  # None: not looked up yet; False: not glibc


def _glibc() -> ctypes.CDLL | None:
    global _libc
    if _libc is None:
        _libc = False
        if platform.libc_ver()[0] == "glibc":
            try:
                _libc = ctypes.CDLL(None)
            except OSError:
                pass
    return _libc or None


def keep_heap_small(fixed_mmap_threshold: bool = True) -> bool:
    """Set the process's malloc parameters (best before its threads allocate); False where they cannot be set.
    Without `fixed_mmap_threshold` only the arenas are bounded (no mmap and page faults per large block)."""
    libc = _glibc()
    if libc is None:
        return False
    mallopt = libc.mallopt
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    settings = [(_M_ARENA_MAX, ARENA_MAX)]
    if fixed_mmap_threshold:
        settings += [(_M_MMAP_THRESHOLD, MMAP_THRESHOLD), (_M_TRIM_THRESHOLD, TRIM_THRESHOLD)]
    ok = all([mallopt(param, value) == 1 for param, value in settings])
    if not ok:
        log.debug("mallopt refused a setting; the heap keeps glibc's defaults")
    return ok


def trim() -> None:
    """Give the heap's free pages back to the kernel (after a burst of allocation, e.g. a search call)."""
    libc = _glibc()
    if libc is not None:
        libc.malloc_trim(0)
