"""The FCM emulator the rows send to, started by the bench on a free port and pinned to a CPU of
its own, so that the rows' CPU and the emulator's never compete."""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from bench.common import ROOT
from bench.transport.records import BenchError
from devstack.processes import (
    ManagedProcess,
    free_port,
    http_ok,
    python_module,
    spawn,
    wait_until,
)
from fcm_emulator.client import EmulatorClient

START_TIMEOUT_S = 20.0
STOP_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class Emulator:
    endpoint: str
    pid: int
    cpu: int | None
    client: EmulatorClient


def choose_cpus() -> tuple[int | None, int | None]:
    """(rows' CPU, emulator's CPU): the first two this process may use; no pinning with one."""
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        print("warning: one CPU only; client and emulator share it, nothing is pinned",
              file=sys.stderr)
        return None, None
    return cpus[0], cpus[1]


@contextlib.contextmanager
def running_emulator(cpu: int | None) -> Iterator[Emulator]:
    """``python -m fcm_emulator`` on a free port, pinned to ``cpu``, stopped on the way out."""
    port = free_port()
    endpoint = f"http://127.0.0.1:{port}"
    with tempfile.TemporaryDirectory(prefix="bench-transport-") as log_dir:
        process = spawn("fcm-emulator", python_module(
            "fcm_emulator", "--host", "127.0.0.1", "--port", str(port)), os.environ,
            Path(log_dir), cwd=ROOT)
        client = EmulatorClient(endpoint)
        try:
            # Pinned at once, before its start-up creates threads (they inherit the affinity).
            if cpu is not None:
                os.sched_setaffinity(process.pid, {cpu})
            _wait_until_healthy(endpoint, process)
            yield Emulator(endpoint, process.pid, cpu, client)
        finally:
            client.close()
            process.terminate(STOP_TIMEOUT_S)


def _wait_until_healthy(endpoint: str, process: ManagedProcess) -> None:
    try:
        wait_until(lambda: http_ok(f"{endpoint}/healthz"), START_TIMEOUT_S,
                   f"the FCM emulator on {endpoint}", process=process)
    except (RuntimeError, TimeoutError) as exc:  # it exited, or never answered
        raise BenchError(str(exc)) from exc
