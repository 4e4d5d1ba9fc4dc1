"""``--profile ROW``: record a row's timed window under cProfile (in the row's process) and print
where its own time went, grouped by library first (in the bench's)."""

from __future__ import annotations

import contextlib
import cProfile
import pstats
from collections.abc import Iterator
from pathlib import Path

from bench.common import ROOT


@contextlib.contextmanager
def profiled(path: str | None) -> Iterator[None]:
    """Profile the block into ``path``; do nothing without one."""
    if path is None:
        yield
        return
    profiler = cProfile.Profile()
    profiler.enable()
    try:
        yield
    finally:
        profiler.disable()
        profiler.dump_stats(path)


def print_profile(path: Path, limit: int = 25) -> None:
    """Own time grouped by library first (the question is usually "whose code?"), then the
    functions. Time inside uvloop's C code is invisible to cProfile and shows in neither."""
    stats = pstats.Stats(str(path))
    by_owner = own_time_by_owner(stats)
    total = sum(by_owner.values())
    print(f"\nown time by owner ({total:.2f} s profiled)")
    for owner, seconds in sorted(by_owner.items(), key=lambda item: -item[1])[:limit]:
        print(f"  {seconds:7.3f} s {seconds / total:6.1%}  {owner}")
    stats.sort_stats("tottime").print_stats(limit)
    stats.sort_stats("cumulative").print_stats(limit)


def own_time_by_owner(stats: pstats.Stats) -> dict[str, float]:
    totals: dict[str, float] = {}
    for (filename, _, _), (_, _, own_s, _, _) in stats.stats.items():  # type: ignore[attr-defined]
        owner = owner_of(filename)
        totals[owner] = totals.get(owner, 0.0) + own_s
    return totals


def owner_of(filename: str) -> str:
    """A third-party package, a project module, a stdlib module, or a C built-in."""
    if "site-packages/" in filename:
        return filename.split("site-packages/", 1)[1].split("/", 1)[0]
    if filename.startswith(f"{ROOT}/"):
        return filename.removeprefix(f"{ROOT}/")
    if filename == "~":
        return "C built-ins called from Python (socket, dict, orjson...)"
    return f"stdlib {Path(filename).name}"
