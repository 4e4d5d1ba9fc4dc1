"""The two servers the rows send to, each started on a free port and pinned to the server CPU:
the HTTP/2 stand-in over TLS (``bench.http2.standin``) and, for the plaintext reference row,
the project's FCM emulator (``bench.transport``'s). Each is reset before a row, and its own
count is what a row is judged by."""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import httpx

from bench.common import ROOT
from bench.http2.rows import Row
from bench.http2.tls import HOST, self_signed
from bench.transport.emulator import Emulator, running_emulator
from bench.transport.records import BenchError
from devstack.processes import free_port, python_module, spawn, wait_until

START_TIMEOUT_S = 20.0
STOP_TIMEOUT_S = 10.0


class Server(Protocol):
    endpoint: str
    port: int
    pid: int
    cafile: str | None

    def reset(self, latency_ms: float) -> None: ...

    def verify(self, row: Row, requests: int) -> dict[str, Any]:
        """Raise ``BenchError`` unless the server answered ``requests`` requests, all 200, in
        the row's HTTP version; return its counts for the record."""


@dataclass
class StandInServer:
    endpoint: str
    port: int
    pid: int
    cafile: str | None
    http: httpx.Client

    def reset(self, latency_ms: float) -> None:
        self.http.post("/_standin/reset", params={"latency_ms": latency_ms}).raise_for_status()

    def stats(self) -> dict[str, Any]:
        response = self.http.get("/_standin/stats")
        response.raise_for_status()
        return dict(response.json())

    def verify(self, row: Row, requests: int) -> dict[str, Any]:
        stats = self.stats()
        if (stats["requests"], stats["ok"]) != (requests, requests) \
                or stats["http_versions"] != {row.http_version: requests}:
            raise BenchError(f"{row.name}: sent {requests} requests over HTTP/{row.http_version},"
                             f" the stand-in saw {stats}")
        return stats


@dataclass
class EmulatorServer:
    endpoint: str
    port: int
    pid: int
    cafile: str | None
    emulator: Emulator

    def reset(self, latency_ms: float) -> None:
        self.emulator.client.reset()
        self.emulator.client.configure(latency_ms=latency_ms)

    def verify(self, row: Row, requests: int) -> dict[str, Any]:
        stats = dict(self.emulator.client.stats())
        if stats["requests"] != requests or stats["by_error"] != {"OK": requests}:
            raise BenchError(f"{row.name}: sent {requests} requests, the emulator saw "
                             f"{stats['requests']} {stats['by_error']}")
        return {"requests": stats["requests"]}


@contextlib.contextmanager
def running_standin(cpu: int | None, max_streams: int) -> Iterator[StandInServer]:
    """The stand-in on a free port with a fresh certificate, pinned to ``cpu``."""
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="bench-http2-") as directory:
        cert = self_signed(Path(directory))
        process = spawn("http2-standin", python_module(
            "bench.http2.standin", "--port", str(port), "--certfile", str(cert.certfile),
            "--keyfile", str(cert.keyfile), "--max-streams", str(max_streams)),
            os.environ, Path(directory), cwd=ROOT)
        endpoint = f"https://{HOST}:{port}"
        http = httpx.Client(base_url=endpoint, verify=str(cert.certfile), timeout=30.0)
        try:
            if cpu is not None:
                os.sched_setaffinity(process.pid, {cpu})
            server = StandInServer(endpoint, port, process.pid, str(cert.certfile), http)
            try:
                wait_until(lambda: _answers(server), START_TIMEOUT_S,
                           f"the stand-in on {endpoint}", process=process)
            except (RuntimeError, TimeoutError) as exc:
                raise BenchError(str(exc)) from exc
            yield server
        finally:
            http.close()
            process.terminate(STOP_TIMEOUT_S)


def _answers(server: StandInServer) -> bool:
    try:
        server.stats()
    except httpx.HTTPError:
        return False
    return True


@contextlib.contextmanager
def running_emulator_server(cpu: int | None) -> Iterator[EmulatorServer]:
    with running_emulator(cpu) as emulator:
        port = int(emulator.endpoint.rsplit(":", 1)[1])
        yield EmulatorServer(emulator.endpoint, port, emulator.pid, None, emulator)
