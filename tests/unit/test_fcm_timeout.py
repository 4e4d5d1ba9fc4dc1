"""The FCM client's answer timeout (herald/adapters/fcm.py): a request without an answer in
``HERALD_FCM_TIMEOUT_S`` is ``TIMEOUT`` (may have been delivered); but a process that the kernel
stopped reads the answers that arrived meanwhile before any timeout fires, and records them as
FCM said. The FCM side is a real HTTP server in a thread of its own (it keeps answering while
the test stops this thread's event loop, as the kernel would stop the whole process)."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from herald.adapters.fcm import FcmClient, open_session
from herald.domain.fcm_errors import FcmError
from herald.settings import Settings


class SlowFcm(BaseHTTPRequestHandler):
    delay_s = 0.3
    handled = 0

    def do_POST(self) -> None:
        SlowFcm.handled += 1
        self.rfile.read(int(self.headers["Content-Length"]))
        time.sleep(self.delay_s)
        body = b'{"name": "projects/p/messages/1"}'
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_args: object) -> None:
        return None


@pytest.fixture
def fcm_url() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), SlowFcm)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


async def send_once(fcm_url: str, timeout_s: float, stop_loop_s: float = 0.0) -> FcmError | None:
    settings = Settings(fcm_endpoint=fcm_url, fcm_timeout_s=timeout_s)
    async with open_session(settings) as session:
        client = FcmClient(session, settings, None)
        request = asyncio.create_task(client.send(b'{"message": {"token": "t"}}'))
        await asyncio.sleep(0.15)  # on the wire; the watch has ticked
        time.sleep(stop_loop_s)  # noqa: ASYNC251 (the whole loop stops, as SIGSTOP would)
        result = await request
        client.close()
        return result.error


async def test_no_answer_in_time_is_a_timeout(fcm_url: str) -> None:
    assert await send_once(fcm_url, timeout_s=0.2) is FcmError.TIMEOUT


async def test_an_answer_in_time_is_read(fcm_url: str) -> None:
    assert await send_once(fcm_url, timeout_s=2.0) is None


async def test_an_answer_that_arrived_while_the_process_was_stopped_is_read_not_timed_out(
        fcm_url: str) -> None:
    """FCM answers after 0.3 s; the loop is stopped from 0.15 s to 1.65 s, past the 0.5 s
    timeout: when it runs again, the answer is in the socket and the timeout due."""
    assert await send_once(fcm_url, timeout_s=0.5, stop_loop_s=1.5) is None


async def test_a_request_withheld_at_the_last_check_never_reaches_fcm(fcm_url: str) -> None:
    """Herald checked before the request, the process stopped, a cancel was confirmed: the
    request's bytes (headers included) do not leave when it runs again."""
    settings = Settings(fcm_endpoint=fcm_url, fcm_timeout_s=2.0)
    SlowFcm.handled = 0
    async with open_session(settings) as session:
        client = FcmClient(session, settings, None)
        withheld = await client.send(b'{"message": {"token": "t"}}', lambda: False)
        sent = await client.send(b'{"message": {"token": "t"}}', lambda: True)
        client.close()
    assert withheld.withheld and not withheld.attempted
    assert sent.ok
    assert SlowFcm.handled == 1
