#!/usr/bin/env bash
# Makes sure RabbitMQ and Redis answer on 127.0.0.1, installing them from the distribution's
# packages (Debian/Ubuntu) and starting them if needed. Safe to run again: it changes nothing
# on a machine where both already answer.
set -euo pipefail

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi

port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

wait_port() {  # name port seconds
  for _ in $(seq 1 "$3"); do port_open "$2" && return 0; sleep 1; done
  echo "ensure-services: $1 did not come up on port $2" >&2
  return 1
}

has_systemd() { [ "$(ps -p 1 -o comm= 2>/dev/null)" = "systemd" ]; }

missing=()
command -v rabbitmq-server >/dev/null 2>&1 || missing+=(rabbitmq-server)
command -v redis-server >/dev/null 2>&1 || missing+=(redis-server)
python3 -c 'import ensurepip, venv' >/dev/null 2>&1 || missing+=(python3-venv)
# Debian's docker-compose (v1) only validates docker-compose.yml in the tests (no engine runs
# here); without --no-install-recommends it would pull in the whole Docker engine.
command -v docker-compose >/dev/null 2>&1 || missing+=(docker-compose)
# Debian's chromium runs the console's browser tests (Playwright drives /usr/bin/chromium; its
# own browser downloads are blocked on these machines).
[ -x /usr/bin/chromium ] || missing+=(chromium)
if [ "${#missing[@]}" -gt 0 ]; then
  echo "ensure-services: installing ${missing[*]}"
  $SUDO apt-get update -q
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

# promtool (Debian's prometheus package) checks and unit-tests deploy/prometheus/alerts.yml. Only
# the tool is wanted: the package's own Prometheus server must not start and hold :9090, so its
# start is refused through policy-rc.d while installing (and it is disabled where systemd runs).
install_promtool() {
  local policy=/usr/sbin/policy-rc.d placed=""
  if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\n# ensure-services.sh: no service starts while promtool is installed\nexit 101\n' \
      | $SUDO tee "$policy" >/dev/null
    $SUDO chmod 0755 "$policy"
    placed=yes
  fi
  [ "${#missing[@]}" -gt 0 ] || $SUDO apt-get update -q
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends prometheus \
    || { [ -z "$placed" ] || $SUDO rm -f "$policy"; return 1; }
  [ -z "$placed" ] || $SUDO rm -f "$policy"
  if has_systemd; then $SUDO systemctl disable --now prometheus >/dev/null 2>&1 || true; fi
}
if ! command -v promtool >/dev/null 2>&1; then
  echo "ensure-services: installing prometheus (for promtool; its server stays stopped)"
  install_promtool
fi

if ! port_open 6379; then
  echo "ensure-services: starting Redis"
  if has_systemd; then $SUDO systemctl start redis-server; else
    $SUDO mkdir -p /var/lib/redis /var/log/redis
    $SUDO redis-server --daemonize yes --bind 127.0.0.1 --port 6379 --save "" --appendonly no \
      --dir /var/lib/redis --logfile /var/log/redis/herald.log
  fi
  wait_port Redis 6379 30
fi

if ! port_open 5672; then
  echo "ensure-services: starting RabbitMQ"
  if has_systemd; then $SUDO systemctl start rabbitmq-server; else $SUDO rabbitmq-server -detached; fi
  wait_port RabbitMQ 5672 90
  $SUDO rabbitmqctl await_startup >/dev/null
fi
