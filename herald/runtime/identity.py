"""Who a running process is: the id it is known by in heartbeats, acks and leases."""

from __future__ import annotations

import os
import socket
import time
import uuid
from dataclasses import dataclass

VERSION = "0.1.0"


@dataclass(frozen=True)
class PodIdentity:
    id: str
    service: str
    host: str
    pid: int
    started_at: float

    @classmethod
    def new(cls, service: str) -> PodIdentity:
        host = socket.gethostname()
        pid = os.getpid()
        return cls(id=f"{service}-{host}-{pid}-{uuid.uuid4().hex[:6]}", service=service,
                   host=host, pid=pid, started_at=time.time())
