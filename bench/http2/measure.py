"""One row's timed window in a fresh process pinned to one CPU: warm up, then send for a fixed
time while the row's own CPU (``time.process_time``), the server's (``/proc``), what other work
took from both pinned CPUs (``/proc/stat``) and the TCP connections the row holds to the server
(``/proc/net/tcp`` and ``/proc/self/fd``) are accounted."""

from __future__ import annotations

import asyncio
import os
import time
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path

import uvloop

from bench import child
from bench.common import cpu_busy_s, process_cpu_s
from bench.http2.rows import ROWS, Plan, Row
from herald.runtime.heap import settle_heap

ESTABLISHED = "01"


@dataclass(frozen=True)
class Measurement:
    """One timed window of one row (picklable, back to the parent)."""

    row: str
    in_flight: int
    messages: int
    seconds: float
    cpu_s: float
    server_cpu_s: float
    others_cpu_s: tuple[float, float] | None
    """Busy time of the row's CPU and the server's CPU that neither accounts for."""
    connections: int
    """TCP connections to the server the row's process held at the end of the window."""
    requests_sent: int
    """Warm-up included: what the server must have counted."""

    @property
    def per_s(self) -> float:
        return self.messages / self.seconds

    @property
    def cpu_ms_per_request(self) -> float:
        return 1000 * self.cpu_s / self.messages


def in_child(plan: Plan) -> Measurement:
    """Run one row in a fresh spawned process (``bench/child.py``)."""
    result = child.in_child(child_main, plan, plan.row, plan.warmup_s + plan.seconds)
    assert isinstance(result, Measurement)
    return result


def child_main(plan: Plan, conn: Connection) -> None:
    if plan.cpu is not None:
        os.sched_setaffinity(0, {plan.cpu})
    try:
        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            conn.send(runner.run(measure(ROWS[plan.row], plan)))
    except Exception as exc:
        conn.send(f"{plan.row}: {exc!r}")
        raise
    finally:
        conn.close()


async def measure(row: Row, plan: Plan) -> Measurement:
    transport = row.open(plan)
    settle_heap()  # the collector's settings of a Herald pod, for every row alike
    try:
        warm = await transport.run(time.perf_counter() + plan.warmup_s)
        before = Sample.take(plan)
        sent = await transport.run(before.wall + plan.seconds)
        after = Sample.take(plan)
        connections = connections_to(plan.server_port)
    finally:
        await transport.close()
    return Measurement(row.name, plan.in_flight(row.connections), sent, after.wall - before.wall,
                       after.cpu - before.cpu, after.server_cpu - before.server_cpu,
                       after.others_since(before), connections, warm + sent)


def connections_to(port: int) -> int:
    """This process's ESTABLISHED TCP sockets whose peer is ``port``: the connections the row
    holds (the bench's own control connections to the server are not counted)."""
    mine = {link.removeprefix("socket:[").removesuffix("]")
            for link in (os.readlink(fd) for fd in Path("/proc/self/fd").iterdir()
                         if fd.is_symlink()) if link.startswith("socket:[")}
    peer = f":{port:04X}"
    count = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()  # sl local remote state ... uid timeout inode
            count += fields[2].endswith(peer) and fields[3] == ESTABLISHED and fields[9] in mine
    return count


@dataclass(frozen=True)
class Sample:
    wall: float
    cpu: float
    server_cpu: float
    busy: tuple[float, float] | None

    @classmethod
    def take(cls, plan: Plan) -> Sample:
        busy = None
        if plan.cpu is not None and plan.server_cpu is not None:
            busy = (cpu_busy_s(plan.cpu), cpu_busy_s(plan.server_cpu))
        return cls(time.perf_counter(), time.process_time(), process_cpu_s(plan.server_pid), busy)

    def others_since(self, before: Sample) -> tuple[float, float] | None:
        if self.busy is None or before.busy is None:
            return None
        return (self.busy[0] - before.busy[0] - (self.cpu - before.cpu),
                self.busy[1] - before.busy[1] - (self.server_cpu - before.server_cpu))
