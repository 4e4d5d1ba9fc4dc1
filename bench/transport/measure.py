"""One row's timed window, in a fresh process of its own pinned to one CPU: warm up, then send
for a fixed time while the row's own CPU (getrusage), the emulator's (``/proc``) and what other
work took from both pinned CPUs (``/proc/stat``) are accounted."""

from __future__ import annotations

import asyncio
import os
import resource
import time
from dataclasses import dataclass
from multiprocessing.connection import Connection

import uvloop

from bench import child
from bench.common import cpu_busy_s, process_cpu_s
from bench.transport.profiling import profiled
from bench.transport.records import Measurement, Plan
from bench.transport.rows import ROWS, Row
from herald.runtime.heap import settle_heap


def in_child(plan: Plan) -> Measurement:
    """Run one row in a fresh spawned process (``bench/child.py``)."""
    result = child.in_child(child_main, plan, plan.row, plan.warmup_s + plan.seconds)
    assert isinstance(result, Measurement)
    return result


def child_main(plan: Plan, conn: Connection) -> None:
    """A row's process: pin to its CPU, start the row's event loop, send back the measurement
    (or the error text, so the parent can say why a row has no number)."""
    if plan.cpu is not None:
        os.sched_setaffinity(0, {plan.cpu})
    row = ROWS[plan.row]
    loop_factory = uvloop.new_event_loop if row.loop == "uvloop" else None
    try:
        with asyncio.Runner(loop_factory=loop_factory) as runner:
            conn.send(runner.run(measure(row, plan)))
    except Exception as exc:
        conn.send(f"{plan.row}: {exc!r}")
        raise
    finally:
        conn.close()


async def measure(row: Row, plan: Plan) -> Measurement:
    """Warm up (connections, the SDK's lazy service, caches), then time a fixed window."""
    transport = row.open(plan)
    settle_heap()  # the collector's settings of a Herald pod, for every row alike
    try:
        warm = await transport.run(time.perf_counter() + plan.warmup_s)
        before = Sample.take(plan)
        with profiled(plan.profile_to):
            sent = await transport.run(before.wall + plan.seconds)
        after = Sample.take(plan)
    finally:
        await transport.close()
    return Measurement(row.name, row.loop, row.in_flight.format(c=plan.concurrency), sent,
                       after.wall - before.wall, after.cpu - before.cpu,
                       after.emulator_cpu - before.emulator_cpu, after.others_since(before),
                       warm + sent)


@dataclass(frozen=True)
class Sample:
    wall: float
    cpu: float
    emulator_cpu: float
    busy: tuple[float, float] | None
    """Busy seconds of the row's CPU and of the emulator's CPU, whoever used them."""

    @classmethod
    def take(cls, plan: Plan) -> Sample:
        usage = resource.getrusage(resource.RUSAGE_SELF)
        busy = None
        if plan.cpu is not None and plan.emulator_cpu is not None:
            busy = (cpu_busy_s(plan.cpu), cpu_busy_s(plan.emulator_cpu))
        return cls(time.perf_counter(), usage.ru_utime + usage.ru_stime,
                   process_cpu_s(plan.emulator_pid), busy)

    def others_since(self, before: Sample) -> tuple[float, float] | None:
        """Busy time of both CPUs that neither the row nor the emulator accounts for."""
        if self.busy is None or before.busy is None:
            return None
        return (self.busy[0] - before.busy[0] - (self.cpu - before.cpu),
                self.busy[1] - before.busy[1] - (self.emulator_cpu - before.emulator_cpu))
