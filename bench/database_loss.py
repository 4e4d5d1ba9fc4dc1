"""The database lost mid-campaign, several times: ``python -m bench.database_loss``.

A private stack (its own nx-27017, the FCM emulator 40 ms away, api, dispatcher, two senders,
heartbeats and sweeps as ``make up`` runs them); per run a campaign to its own devices, and once
2,000 are sent, ``kill -9`` of nx-27017, ``--down-s`` seconds down, then a start on the same files.
Reported per run: seconds from the database's return to the campaign's end, recipients sent twice
(FCM accepted them twice; the bound is one batch, ``HERALD_SENDER_BATCH_SIZE``, per sender),
recipients lost (targeted and never accepted), and whether the final counts, the audit and FCM's
own record agree token for token.

The baseline is the same campaign without the kill, in the same run (its duration and its
duplicates, which should be none).
"""

from __future__ import annotations

import argparse
import time
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import orjson

from bench.common import format_table, machine, results_path, source_version, write_json
from bench.stack import BenchStack, import_devices, running_stack, wait_for_campaign
from devstack.processes import wait_until

SLOW_FCM_MS = 40
SENDERS = 2
BATCH_SIZE = 500


@dataclass(frozen=True)
class Run:
    kind: str
    finished_after_return_s: float
    duration_s: float
    sent_twice: int
    lost: int
    exact: bool


def devices(prefix: str, count: int) -> list[dict[str, Any]]:
    return [{"token": f"{prefix}-{i:06d}-" + "x" * 120, "user_id": f"u{i}", "platform": "android",
             "topics": [prefix]} for i in range(count)]


def run_once(bench: BenchStack, kind: str, index: int, count: int, down_s: float) -> Run:
    prefix = f"{kind}{index}"
    population = devices(prefix, count)
    import_devices(bench.api, population)
    bench.emulator.reset()
    bench.emulator.configure(latency_ms=SLOW_FCM_MS)
    started = time.monotonic()
    response = bench.api.post("/v1/campaigns", json={"title": "t", "body": "b",
                                                      "audience": {"topics": [prefix]}})
    response.raise_for_status()
    campaign_id = str(response.json()["id"])
    back = started
    if kind == "killed":
        wait_for_campaign(bench.api, campaign_id, lambda c: c["counts"]["sent"] >= 2_000,
                          "2,000 sent", 120, 0.05)
        mongodb = bench.stack.processes["mongodb"]
        mongodb.kill()
        time.sleep(down_s)
        bench.stack.start_mongodb()
        back = time.monotonic()
    campaign = wait_for_api_campaign(bench, campaign_id)
    ended = time.monotonic()
    tokens = {device["token"] for device in population}
    return Run(kind, round(ended - back, 2), round(ended - started, 2),
               *account(bench, campaign_id, campaign, tokens))


def wait_for_api_campaign(bench: BenchStack, campaign_id: str) -> dict[str, Any]:
    def finished() -> bool:
        try:
            status = bench.api.get(f"/v1/campaigns/{campaign_id}").json().get("status")
        except Exception:  # the api answers 503 while the database is away
            return False
        return status in ("completed", "failed", "cancelled")
    wait_until(finished, 300, "the campaign to finish", interval_s=0.1)
    return dict(bench.api.get(f"/v1/campaigns/{campaign_id}").json())


def account(bench: BenchStack, campaign_id: str, campaign: dict[str, Any],
            tokens: set[str]) -> tuple[int, int, bool]:
    """(sent twice, lost, final counts = audit = FCM's record)."""
    accepted = Counter(row.token for row in bench.emulator.received()
                       if row.accepted and row.reached_fcm and row.token in tokens)
    response = bench.api.get(f"/v1/campaigns/{campaign_id}/recipients",
                             params={"outcome": "sent"})
    audit = {orjson.loads(line)["token"] for line in response.content.splitlines()}
    exact = (audit == set(accepted) and campaign["counts"]["sent"] == len(audit)
             and campaign["status"] == "completed")
    return sum(n - 1 for n in accepted.values()), len(tokens - set(accepted)), exact


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--devices", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--down-s", type=float, default=5.0)
    parser.add_argument("--output", type=Path, default=results_path("database_loss.json"))
    args = parser.parse_args()
    runs: list[Run] = []
    with running_stack(senders=SENDERS, api_timeout_s=60) as bench:
        runs.append(run_once(bench, "baseline", 0, args.devices, args.down_s))
        for index in range(args.runs):
            runs.append(run_once(bench, "killed", index, args.devices, args.down_s))
    print(format_table(("run", "finished after the return (s)", "whole campaign (s)",
                        "sent twice", "lost", "counts = audit = FCM"),
                       [(r.kind, f"{r.finished_after_return_s:.1f}", f"{r.duration_s:.1f}",
                         str(r.sent_twice), str(r.lost), "yes" if r.exact else "NO")
                        for r in runs]))
    print(f"bound on sent twice: one batch per sender = {SENDERS * BATCH_SIZE}")
    write_json(args.output, {"bench": "database_loss", "source": source_version(),
                             "machine": machine(["pymongo", "nx-27017"]),
                             "devices": args.devices, "down_s": args.down_s,
                             "runs": [asdict(r) for r in runs]})


if __name__ == "__main__":
    main()
