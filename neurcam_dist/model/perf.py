"""Process-level performance settings for CPU training.

Every training step allocates and frees activation buffers of a few MB. glibc hands such blocks
back to the kernel on free and the next step pays a page fault per 4 KiB page to get them back;
on a 2-core machine that cost about 15% of an epoch (measured: 0.71 s -> 0.61 s per pendigits
warm-up epoch). Raising glibc's mmap and trim thresholds keeps the freed memory in the process.

A thread other than the main one (a Ray Train worker runs the training function in one)
allocates from its own arena, made of 64 MiB heaps; glibc (2.36 here) deletes such a heap
whenever it falls empty, whatever the trim threshold, unless the top pad exceeds what the heap
before it could still give. Without a large pad the worker mapped, grew and unmapped a heap
several times a second (20,000-78,000 page faults a second, pendigits epochs 0.69-0.72 s against
0.64 s with the pad), so the pad is raised past a heap's size too. Only address space is reserved;
memory is touched as before.

Written by hand because no maintained package exposes ``mallopt``; it is a no-op off glibc.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import sys

_M_TRIM_THRESHOLD = -1
_M_TOP_PAD = -2
_M_MMAP_THRESHOLD = -3
HEAP_BYTES = 64 << 20  # glibc's largest heap of a thread's arena (HEAP_MAX_SIZE on 64-bit)
_done = False


def keep_freed_memory(mmap_threshold: int = 32 << 20, trim_threshold: int = 1 << 30,
                      top_pad: int = 2 * HEAP_BYTES) -> bool:
    """Ask glibc to keep freed activation buffers for reuse, in the main arena and in threads'
    arenas. Returns True when applied."""
    global _done
    if _done:
        return True
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        ok = (libc.mallopt(_M_MMAP_THRESHOLD, mmap_threshold) == 1
              and libc.mallopt(_M_TRIM_THRESHOLD, trim_threshold) == 1
              and libc.mallopt(_M_TOP_PAD, top_pad) == 1)
    except (OSError, AttributeError):
        return False
    _done = ok
    return ok
