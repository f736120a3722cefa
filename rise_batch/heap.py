"""Keep a long-lived worker's C heap from holding memory it freed: at most two malloc arenas.

A trajectory actor searches from several threads at once (its trajectories' tool calls, the BM25 threads), and each
search allocates and frees large arrays (the scorer's per-document scores, 4 MB at 1M documents, its top-k
buffers, the hits' lists). glibc's malloc serves each thread from an arena of its own (up to 8 per core), and a
block freed in an arena stays there as private dirty memory, so the worker keeps the peak of every thread's past.
Two arenas bound that (bench/actor_memory.py at 1M, 4 searching threads: 107 -> 100 MB private dirty at the same
CPU per search). A fixed mmap threshold as well (every block of 256 KiB or more its own mapping, returned when freed)
gives 91 MB but costs ~4 ms of CPU per search call (a mapping and its page faults per large block), so it is left
to `keep_heap_small(fixed_mmap_threshold=True)`. Nothing here changes an answer; on a libc other than glibc it does
nothing.
"""

from __future__ import annotations

import ctypes
import gc
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


def keep_heap_small(fixed_mmap_threshold: bool = False) -> bool:
    """Set the process's malloc parameters (best before its threads allocate); False where they cannot be set.
    With `fixed_mmap_threshold` large blocks are mapped and unmapped each time as well (less memory, more CPU)."""
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


def freeze_loaded() -> int:
    """Move every object alive now (imported modules, a loaded index, a client) out of the garbage collector's
    sight, for a long-lived worker once it is loaded; returns how many. A full collection otherwise traverses the
    ~100k objects of the imports each time (60-160 ms of CPU in a trajectory actor, in whichever thread allocated
    last: a search's link loop, the event loop) to find nothing, since they live as long as the process. What is
    garbage already is collected first, so nothing dead is kept."""
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()
