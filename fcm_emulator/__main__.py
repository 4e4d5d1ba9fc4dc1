"""``python -m fcm_emulator [--host H] [--port P]``: serve the FCM stand-in."""

from __future__ import annotations

import argparse
import logging

import uvloop
from aiohttp import web

from fcm_emulator.server import make_app


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8681)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    web.run_app(make_app(), host=args.host, port=args.port, access_log=None,
                print=lambda _: None, loop=uvloop.new_event_loop(), shutdown_timeout=1.0)


if __name__ == "__main__":
    main()
