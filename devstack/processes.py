"""Starting and stopping the stack's processes without a shell in between.

Each service runs as ``python -m ...`` directly (exec form), in its own session, with its output
in a log file; SIGTERM sent to the recorded PID reaches the Python process itself, so graceful
shutdown works the same here as in a container.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import httpx


@dataclass
class ManagedProcess:
    name: str
    process: subprocess.Popen[bytes]
    log_path: Path

    @property
    def pid(self) -> int:
        return self.process.pid

    def alive(self) -> bool:
        return self.process.poll() is None

    def terminate(self, timeout_s: float) -> int | None:
        """SIGTERM, wait up to ``timeout_s``, then SIGKILL; the exit code."""
        self.request_stop()
        return self.wait_stopped(timeout_s)

    def request_stop(self) -> None:
        """SIGTERM, once: the process starts its graceful stop."""
        if self.alive():
            self.process.send_signal(signal.SIGTERM)

    def wait_stopped(self, timeout_s: float) -> int | None:
        """Wait up to ``timeout_s`` for the process to exit, then SIGKILL; the exit code."""
        try:
            return self.process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.process.kill()
        return self.process.wait()

    def kill(self) -> None:
        """kill -9: no cleanup, no goodbye."""
        if self.alive():
            self.process.kill()
        self.process.wait()

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except FileNotFoundError:
            return ""


def spawn(name: str, argv: Sequence[str], env: Mapping[str, str], log_dir: Path,
          cwd: Path | None = None) -> ManagedProcess:
    log_dir.mkdir(parents=True, exist_ok=True)
    log_path = log_dir / f"{name}.log"
    with open(log_path, "ab") as log:
        process = subprocess.Popen(list(argv), env=dict(env), stdout=log, stderr=subprocess.STDOUT,
                                   stdin=subprocess.DEVNULL, cwd=cwd, start_new_session=True)
    return ManagedProcess(name, process, log_path)


def python_module(module: str, *args: str) -> list[str]:
    return [sys.executable, "-m", module, *args]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def port_open(port: int, host: str = "127.0.0.1") -> bool:
    with contextlib.suppress(OSError), socket.create_connection((host, port), timeout=0.5):
        return True
    return False


def wait_until(condition: Callable[[], bool], timeout_s: float, what: str,
               interval_s: float = 0.1, process: ManagedProcess | None = None) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return
        if process is not None and not process.alive():
            raise RuntimeError(f"{process.name} exited while waiting for {what}:\n"
                               f"{process.log_tail()}")
        time.sleep(interval_s)
    tail = f":\n{process.log_tail()}" if process is not None else ""
    raise TimeoutError(f"timed out after {timeout_s:.0f}s waiting for {what}{tail}")


def http_ok(url: str) -> bool:
    try:
        return httpx.get(url, timeout=1.0).status_code == 200
    except httpx.HTTPError:
        return False


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def terminate_pid(pid: int, timeout_s: float) -> None:
    """Stop a process this run did not start (``make down`` after ``make up``)."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and pid_alive(pid):
        time.sleep(0.1)
    if pid_alive(pid):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
