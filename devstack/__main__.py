"""``python -m devstack up|down|status|demo``: the local stack behind ``make up/down/demo``.

The processes run detached, each in its own session, with logs in ``.run/logs``; their PIDs are
kept in ``.run/stack.json`` so ``down`` can SIGTERM exactly them (services first, then the FCM
emulator and nx-27017), waiting for each to finish its graceful stop.
"""

from __future__ import annotations

import argparse
import json
import sys

from devstack import demo
from devstack.isolation import BROKER_FILE, dev_broker, forget_dev_broker
from devstack.processes import pid_alive, port_open, terminate_pid
from devstack.stack import BOOTSTRAP_KEY_FILE, REPO, Stack, StackConfig
from herald.names import CANCEL_EXCHANGE

RUN_DIR = REPO / ".run"
STATE = RUN_DIR / "stack.json"
METRICS_PORTS = {"dispatcher": "9101", "scheduler-1": "9103", "sender-1": "9111",
                 "sender-2": "9112"}
STOP_TIMEOUT_S = 30.0


def _running() -> dict[str, int]:
    if not STATE.exists():
        return {}
    pids: dict[str, int] = json.loads(STATE.read_text())
    return {name: pid for name, pid in pids.items() if pid_alive(pid)}


def _taken_ports(config: StackConfig) -> list[int]:
    ports = [config.mongodb_port, config.fcm_port, config.api_port,
             *(int(port) for port in METRICS_PORTS.values())]
    return [port for port in ports if port_open(port)]


def up() -> int:
    if _running():
        print("herald: the stack is already up (make down stops it)")
        return 0
    config = StackConfig(run_dir=RUN_DIR)
    # Another stack on these ports would answer this one's readiness checks, and its services
    # would then work on that stack's database: refuse instead.
    if taken := _taken_ports(config):
        print(f"herald: ports {', '.join(map(str, taken))} are in use (another stack?); "
              "not starting")
        return 1
    vhost, users = dev_broker(RUN_DIR)
    config = StackConfig(run_dir=RUN_DIR, rabbitmq_url=users.service.url(vhost),
                         cancel_rabbitmq_url=users.cancel.url(vhost))
    stack = Stack(config)
    try:
        stack.start_mongodb()
        stack.start_emulator()
        stack.start_service("api")
        stack.start_service("dispatcher", HERALD_METRICS_PORT=METRICS_PORTS["dispatcher"])
        for name in ("sender-1", "sender-2"):
            stack.start_service("sender", name, HERALD_METRICS_PORT=METRICS_PORTS[name])
        stack.start_service("scheduler", "scheduler-1",
                            HERALD_METRICS_PORT=METRICS_PORTS["scheduler-1"])
    except Exception:
        stack.stop()
        raise
    STATE.write_text(json.dumps({name: p.pid for name, p in stack.processes.items()}, indent=2))
    print(f"herald: up. API {config.api_url} (docs at {config.api_url}/docs), "
          f"FCM emulator {config.fcm_url}, logs in {RUN_DIR / 'logs'}")
    print(f"herald: admin API key (also in {RUN_DIR / BOOTSTRAP_KEY_FILE}):\n  {config.api_key}")
    print(f"herald: AMQP cancels may be published to {CANCEL_EXCHANGE} (vhost {vhost}) as "
          f"{users.cancel.name} (password in {RUN_DIR / BROKER_FILE}):\n  "
          f"{config.cancel_rabbitmq_url}")
    return 0


def down() -> int:
    pids = _running()
    order = sorted(pids, key=lambda name: (name == "mongodb", name == "fcm-emulator"))
    for name in order:
        terminate_pid(pids[name], STOP_TIMEOUT_S)
        print(f"herald: stopped {name}")
    STATE.unlink(missing_ok=True)
    return 0


def clean() -> int:
    """The stack's vhost and broker users go (``make clean``; ``make down`` keeps them, as it
    keeps the stack's data)."""
    if _running():
        print("herald: the stack is up; make down first")
        return 1
    vhost = forget_dev_broker(RUN_DIR)
    if vhost is not None:
        print(f"herald: removed the RabbitMQ vhost {vhost} and its users")
    return 0


def status() -> int:
    running = _running()
    for name, pid in running.items():
        print(f"{name:<14} pid {pid}")
    if not running:
        print("herald: the stack is down")
    return 0


def run_demo(devices: int, stop_at: int) -> int:
    """``make demo``: the stack (started unless it is up), then the story on it."""
    if up() != 0:
        return 1
    config = StackConfig(run_dir=RUN_DIR)
    return demo.run(config.api_url, config.fcm_url, config.api_key,
                    RUN_DIR / BOOTSTRAP_KEY_FILE, devices, stop_at, RUN_DIR / "demo")


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m devstack", description=__doc__)
    parser.add_argument("command", choices=["up", "down", "status", "demo", "clean"])
    parser.add_argument("--devices", type=int, default=demo.DEVICES,
                        help="demo: how many synthetic devices to import")
    parser.add_argument("--stop-at", type=int, default=demo.STOP_AT,
                        help="demo: stop the campaign once this many are sent")
    args = parser.parse_args()
    if args.command == "demo":
        return run_demo(args.devices, args.stop_at)
    return {"up": up, "down": down, "status": status, "clean": clean}[args.command]()


if __name__ == "__main__":
    sys.exit(main())
