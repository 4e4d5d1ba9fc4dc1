"""The collector's settings for a long-lived Herald process.

A sender keeps hundreds of requests in flight, each a task with its frames, futures and buffers
that lives one FCM round trip. With CPython's default young-generation threshold (700 net
allocations) the collector runs ~120 times a second, each time walking every one of those
in-flight objects, and stalls the event loop for up to tens of milliseconds: measured with the
sender's window at 256 connections and FCM 50 ms away, 12% of the wall clock went to collections
and a request took 55 ms instead of 51 (``bench.transport``, issue 12). Almost everything those
requests allocate is freed by reference counting; the collector only has to find cycles, which
it still does, ten thousand allocations apart.
"""

from __future__ import annotations

import gc

YOUNG_GENERATION_THRESHOLD = 10_000
"""Net container allocations between two young collections (CPython's default: 700)."""


def settle_heap() -> None:
    """Call once the process is built, before it takes work: everything alive now (modules,
    settings, clients) lives as long as the process and is moved out of the collector's reach
    (a full collection of a fresh worker's ~100,000 objects stalls the loop ~70 ms), and young
    collections become rarer (see the module's note)."""
    gc.freeze()
    _, middle, oldest = gc.get_threshold()
    gc.set_threshold(YOUNG_GENERATION_THRESHOLD, middle, oldest)
