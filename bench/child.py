"""One bench row in a fresh spawned process, so rows never share a loop, pool or import state;
its result (or the error text that says why there is none) comes back through a pipe."""

from __future__ import annotations

import multiprocessing
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import TypeVar

from bench.transport.records import BenchError

Plan = TypeVar("Plan")
Result = TypeVar("Result")

CHILD_SLACK_S = 120.0
"""Time a row's process may take beyond its own time (start-up, a slow last batch)."""


def in_child(main: Callable[[Plan, Connection], None], plan: Plan, name: str,
             seconds: float) -> object:
    """Run ``main(plan, conn)`` in a spawned process; what it sent back. Raises ``BenchError``
    with the row's own words when it sent an error text, died, or took too long."""
    context = multiprocessing.get_context("spawn")
    receive, send = context.Pipe(duplex=False)
    process = context.Process(target=main, args=(plan, send), name=f"bench-{name}")
    process.start()
    send.close()
    try:
        if not receive.poll(seconds + CHILD_SLACK_S):
            raise BenchError(f"{name}: no result within the time allowed")
        result: object = receive.recv()
    except EOFError:
        raise BenchError(f"{name}: the row's process died without a result") from None
    finally:
        process.join(timeout=30)
        if process.is_alive():
            process.kill()
    if isinstance(result, str):
        raise BenchError(result)
    return result
