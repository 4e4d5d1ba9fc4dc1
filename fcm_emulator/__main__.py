"""``python -m fcm_emulator [--host H] [--port P] [--service-account PATH]... [--keep-bodies]``:
serve the FCM stand-in. With a service account, every send needs an access token from its
``/token`` (OAuth on); without one, none does."""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

import uvloop
from aiohttp import web

from fcm_emulator.server import make_app


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8681)
    parser.add_argument("--service-account", type=Path, action="append", default=[],
                        metavar="PATH", help="a service-account JSON file whose grants /token "
                        "accepts (repeatable); any turns OAuth on")
    parser.add_argument("--keep-bodies", action="store_true",
                        help="keep every request body in /_emulator/requests (large)")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    web.run_app(make_app(args.service_account, keep_bodies=args.keep_bodies),
                host=args.host, port=args.port, access_log=None,
                print=lambda _: None, loop=uvloop.new_event_loop(), shutdown_timeout=1.0)


if __name__ == "__main__":
    main()
