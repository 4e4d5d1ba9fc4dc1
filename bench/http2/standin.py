"""An FCM stand-in that speaks HTTP/2: a small ASGI app served by hypercorn over TLS, where ALPN
offers ``h2`` and ``http/1.1`` on the same port, so the HTTP/1.1 and HTTP/2 rows of
``bench.http2`` meet the same server code.

It answers ``POST /v1/projects/{p}/messages:send`` as FCM does on success (200,
``{"name": "projects/p/messages/N"}``) after ``latency_ms`` (``asyncio.sleep``), and keeps the
counts the bench judges a row by: requests answered (and how many of them 200), the most in
flight at once, and the client addresses seen (one per TCP connection, whatever the protocol).
``POST /_standin/reset?latency_ms=N`` clears them and sets the latency; ``GET /_standin/stats``
reads them.

``python -m bench.http2.standin --port P --certfile C --keyfile K`` (the bench starts it pinned
to a CPU of its own). HTTP/2 settings: at most ``--max-streams`` concurrent streams per
connection (100, what users report of Google's endpoint); connections are never closed after a
number of requests (hypercorn closes them after 1,000 by default; FCM does not).
"""

from __future__ import annotations

import argparse
import asyncio
import re
import signal
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson
import uvloop
from hypercorn.asyncio import serve
from hypercorn.config import Config

SEND_PATH = re.compile(r"/v1/projects/([^/]+)/messages:send")
BACKLOG = 2048
"""256 connections may open at once."""
NEVER = 10**12

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]


@dataclass
class Counts:
    latency_s: float = 0.0
    requests: int = 0
    ok: int = 0
    in_flight: int = 0
    max_in_flight: int = 0
    clients: set[tuple[str, int]] = field(default_factory=set)
    protocols: dict[str, int] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {"latency_ms": self.latency_s * 1000, "requests": self.requests, "ok": self.ok,
                "max_in_flight": self.max_in_flight, "connections_seen": len(self.clients),
                "http_versions": self.protocols}


class StandIn:
    """The ASGI app: FCM's send method, and the bench's two control endpoints."""

    def __init__(self) -> None:
        self.counts = Counts()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        body = await read_body(receive)
        match = SEND_PATH.fullmatch(scope["path"])
        if scope["method"] == "POST" and match:
            await self._send_message(scope, match[1], body, send)
        elif scope["path"] == "/_standin/stats":
            await respond(send, 200, orjson.dumps(self.counts.as_dict()))
        elif scope["method"] == "POST" and scope["path"] == "/_standin/reset":
            self.counts = Counts(latency_s=latency_ms(scope) / 1000)
            await respond(send, 200, b"{}")
        else:
            await respond(send, 404, b'{"error": {"code": 404, "status": "NOT_FOUND"}}')

    async def _send_message(self, scope: Scope, project: str, body: bytes, send: Send) -> None:
        counts = self.counts
        counts.in_flight += 1
        counts.max_in_flight = max(counts.max_in_flight, counts.in_flight)
        counts.clients.add(tuple(scope["client"]))
        version = scope["http_version"]
        counts.protocols[version] = counts.protocols.get(version, 0) + 1
        try:
            await asyncio.sleep(counts.latency_s)  # at 0 too: yield, as a real server would
            counts.requests += 1
            if not is_message(body):
                await respond(send, 400, b'{"error": {"code": 400, "status": "INVALID_ARGUMENT"}}')
                return
            counts.ok += 1
            await respond(send, 200, b'{"name": "projects/%s/messages/%d"}'
                          % (project.encode(), counts.ok))
        finally:
            counts.in_flight -= 1


def is_message(body: bytes) -> bool:
    try:
        parsed = orjson.loads(body)
    except orjson.JSONDecodeError:
        return False
    return isinstance(parsed, dict) and isinstance(parsed.get("message"), dict)


def latency_ms(scope: Scope) -> float:
    query = dict(part.split("=", 1) for part in scope["query_string"].decode().split("&")
                 if "=" in part)
    return float(query.get("latency_ms", 0))


async def read_body(receive: Receive) -> bytes:
    chunks = []
    while True:
        message = await receive()
        chunks.append(message.get("body", b""))
        if not message.get("more_body"):
            return b"".join(chunks)


async def respond(send: Send, status: int, body: bytes) -> None:
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json; charset=UTF-8"),
                            (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})


def config(args: argparse.Namespace) -> Config:
    settings = Config()
    settings.bind = [f"127.0.0.1:{args.port}"]
    settings.certfile, settings.keyfile = args.certfile, args.keyfile
    settings.alpn_protocols = ["h2", "http/1.1"]
    settings.h2_max_concurrent_streams = args.max_streams
    settings.keep_alive_max_requests = NEVER
    settings.keep_alive_timeout = 60.0
    settings.backlog = BACKLOG
    settings.accesslog = None
    return settings


async def main_async(args: argparse.Namespace) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    await serve(StandIn(), config(args), shutdown_trigger=stop.wait)  # type: ignore[arg-type]


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.http2.standin", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--certfile", required=True)
    parser.add_argument("--keyfile", required=True)
    parser.add_argument("--max-streams", type=int, default=100,
                        help="HTTP/2 SETTINGS_MAX_CONCURRENT_STREAMS per connection")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> None:
    uvloop.run(main_async(parse_args(argv)))


if __name__ == "__main__":
    main()
