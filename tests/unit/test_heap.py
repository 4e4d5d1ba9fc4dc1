"""``settle_heap``: what a Herald process does to the collector before it takes work. Run in a
child interpreter, so the test process keeps its own collector settings."""

from __future__ import annotations

import subprocess
import sys

from herald.runtime.heap import YOUNG_GENERATION_THRESHOLD

PROBE = """
import gc
from herald.runtime.heap import settle_heap
kept = [[] for _ in range(1000)]
before = gc.get_threshold()
settle_heap()
print(before[1], before[2], *gc.get_threshold(), gc.get_freeze_count())
"""


def test_settle_heap_freezes_what_exists_and_makes_young_collections_rarer() -> None:
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True,
                         check=True).stdout.split()
    middle, oldest, young_after, middle_after, oldest_after, frozen = map(int, out)
    assert young_after == YOUNG_GENERATION_THRESHOLD > 700
    assert (middle_after, oldest_after) == (middle, oldest)
    assert frozen >= 1000
