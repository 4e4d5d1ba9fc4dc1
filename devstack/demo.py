"""``make demo``: the story Herald exists for, told by the real services.

50,000 synthetic devices are imported; "Live now" (a marketing campaign, the default purpose)
goes to those with push enabled that opted in to marketing (about 68% of them), with a broken
link; when about 12,000 are sent, the on-call lead stops it with a ``responder`` key; the exact
final numbers and the audit files come out; then one ``correct`` call sends the fixed link to
everyone: a new notification to the unsent, a replacement (same tag and collapse id) to the sent.
The FCM emulator's own record proves the result: every targeted device ends with exactly one
corrected notification.

:func:`run_story` is the story at any size (the end-to-end test runs it with 5,000 devices);
:func:`run` is ``make demo``'s entry point, which tells it at 50,000.
"""

from __future__ import annotations

import random
import string
import sys
import time
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import orjson

from fcm_emulator.client import EmulatorClient, Received
from herald.domain.payload import web_push_topic

TERMINAL = {"completed", "failed", "cancelled", "missed"}
OUTCOMES = ("sent", "failed", "unsent")
BULK_SIZE = 10_000
SEED = 2026
IMPORT_NOTE = "imported-devices.json"
DEVICES = 50_000
STOP_AT = 12_000
BROKEN_URL = "https://example.com/live-nwo"
FIXED_URL = "https://example.com/live-now"
SLOW_FCM_MS = 150.0
"""The emulator's answer time while the broken campaign runs: slow enough that ~12,000 is a
moment in the middle of the send, not a blur at its start."""
FOLLOW_POLL_S = 0.1
"""Counts are read ten times a second (at least four), so the stop lands close to ``stop_at``."""
CONFIRM_POLL_S = 0.02
LEAD = "the on-call lead"
MARKETING = "marketing"
FOLLOW_UP_TIMEOUT_S = 300.0
"""Deadlines for each wait of the story (sending to ``stop_at``, each follow-up), and for the
cancel's confirmation: a stuck step fails the story instead of hanging it."""
CONFIRM_TIMEOUT_S = 30.0


class StoryFailed(AssertionError):
    """A step of the story did not happen, or a proof did not hold."""


def _check(holds: bool, failure: str) -> None:
    if not holds:
        raise StoryFailed(failure)


@dataclass(frozen=True)
class Counts:
    targeted: int
    sent: int
    failed: int
    unsent: int

    @classmethod
    def of(cls, campaign: dict[str, Any]) -> Counts:
        counts = campaign["counts"]
        return cls(counts["targeted"], counts["sent"], counts["failed"], counts["unsent"])

    @property
    def add_up(self) -> bool:
        return self.sent + self.failed + self.unsent == self.targeted


@dataclass(frozen=True)
class StopTimings:
    """How long the stop took, measured from just before the cancel call was made."""

    call_to_last_fcm_ms: float
    """To the last request of the campaign the emulator received (<= 0: none after the call)."""
    requests_after_call: int
    """Requests the emulator received after the call: those already on their way."""
    call_to_cancelled_ms: float
    """To the first answer saying ``cancelled`` (polled every 20 ms)."""
    recorded_ms: float | None
    """The campaign's own record: cancel requested → every pod acknowledged."""


@dataclass(frozen=True)
class Proof:
    """What the emulator's record shows after the correction (each device counted once)."""

    replaced: int
    """Devices that had the broken link and got exactly one replacement with its tag."""
    new: int
    """Unsent devices that got exactly one new, corrected notification."""
    dead_unsent: int
    """Unsent devices whose token turned out dead: one attempt, refused by FCM."""
    dead_original: int
    """Devices whose token FCM refused in the original: nothing on them to correct."""


@dataclass(frozen=True)
class StoryResult:
    campaign_id: str
    counts: Counts
    stopped_by: str
    stop: StopTimings
    audit_files: dict[str, Path]
    retarget_id: str
    amend_id: str
    proof: Proof


def synthetic_devices(count: int, seed: int = SEED) -> list[dict[str, Any]]:
    """Realistic-looking devices: FCM-sized tokens, 20% push disabled, some dead tokens."""
    rnd = random.Random(seed)
    alphabet = string.ascii_letters + string.digits + "-_"
    devices = []
    for i in range(count):
        body = "".join(rnd.choices(alphabet, k=140))
        roll = rnd.random()
        prefix = "unregistered-" if roll < 0.02 else "invalid-" if roll < 0.025 else ""
        devices.append({
            "token": f"{prefix}d{i:06d}:{body}", "user_id": f"user-{i // 2:06d}",
            "platform": rnd.choice(["android", "android", "ios", "web"]),
            "push_enabled": rnd.random() >= 0.2, "marketing_enabled": rnd.random() < 0.85,
            "topics": rnd.sample(["news", "sports", "live", "offers"], k=rnd.randint(0, 3)),
            "locale": rnd.choice(["en-US", "ko-KR", "es-ES"]),
            "timezone": rnd.choice(["America/New_York", "Asia/Seoul", "Europe/Madrid"]),
            "attributes": {"gender": rnd.choice("fm"), "birth_year": rnd.randint(1950, 2008)},
        })
    return devices


def import_devices(api: httpx.Client, devices: list[dict[str, Any]]) -> float:
    started = time.monotonic()
    for start in range(0, len(devices), BULK_SIZE):
        response = api.post("/v1/devices/bulk", json={"devices": devices[start:start + BULK_SIZE]})
        response.raise_for_status()
    return time.monotonic() - started


def say(line: str = "") -> None:
    print(line, flush=True)


# -- the story -------------------------------------------------------------------------------


def run_story(api: httpx.Client, emulator: EmulatorClient, devices: int = DEVICES,
              stop_at: int = STOP_AT, out_dir: Path = Path(".run/demo"),
              slow_fcm_ms: float = SLOW_FCM_MS, rate_per_s: int | None = None) -> StoryResult:
    """Import, send, stop at about ``stop_at`` sent, audit, correct everyone, prove it.

    ``api`` carries an admin key (it mints the lead's and marketing's keys). Every proof is
    checked against the emulator's record and raises :class:`StoryFailed` if it does not hold.
    ``rate_per_s`` caps the broken campaign (a small audience is otherwise all on the wire
    before anyone can read a count and stop it).
    """
    emulator.reset()
    _import_once(api, devices, out_dir)
    lead = _client_as(api, _mint_key(api, LEAD, "responder"))
    marketing = _client_as(api, _mint_key(api, MARKETING, "operator"))
    try:
        emulator.configure(latency_ms=slow_fcm_ms)
        stopped = _send_and_stop(api, lead, marketing, emulator, stop_at, out_dir, rate_per_s)
        emulator.configure(latency_ms=0)
        retarget_id, amend_id, proof = _correct_and_prove(api, marketing, emulator, stopped)
    finally:
        emulator.configure(latency_ms=0)  # a stack left running answers at full speed
        lead.close()
        marketing.close()
    return StoryResult(stopped.campaign["id"], stopped.counts, _actor_name(stopped.campaign),
                       stopped.timings, stopped.files, retarget_id, amend_id, proof)


@dataclass(frozen=True)
class _Stopped:
    """The broken campaign once cancelled: its view, numbers, audit files, and the emulator's
    record up to then (every request it made)."""

    campaign: dict[str, Any]
    counts: Counts
    files: dict[str, Path]
    timings: StopTimings
    record: list[Received]


def _send_and_stop(api: httpx.Client, lead: httpx.Client, marketing: httpx.Client,
                   emulator: EmulatorClient, stop_at: int, out_dir: Path,
                   rate_per_s: int | None) -> _Stopped:
    campaign_id = _send_live_now(marketing, rate_per_s)
    _follow_until(api, campaign_id, stop_at)
    stop, campaign = _stop(lead, campaign_id, stop_at)
    record = emulator.received()
    counts = _final_numbers(campaign)
    files = _write_audit(api, campaign_id, counts, out_dir)
    timings = _stop_timings(stop, campaign, record)
    _print_stop(timings)
    _prove_original(record, files)
    return _Stopped(campaign, counts, files, timings, record)


def _correct_and_prove(api: httpx.Client, marketing: httpx.Client, emulator: EmulatorClient,
                       stopped: _Stopped) -> tuple[str, str, Proof]:
    retarget_id, amend_id = _correct(marketing, stopped.campaign["id"])
    follow_ups = _wait_follow_ups(api, retarget_id, amend_id)
    corrections = emulator.received()[len(stopped.record):]
    proof = prove_correction(stopped.record, corrections, AuditSets.read(stopped.files),
                             stopped.campaign["replace_key"], follow_ups[0]["replace_key"])
    _print_proof(proof, follow_ups)
    _prove_conformance(emulator)
    return retarget_id, amend_id, proof


def _prove_conformance(emulator: EmulatorClient) -> None:
    """Every body the story sent was checked by the emulator against Google's own description
    of FCM v1 (its discovery document), with an OAuth token of the stack's service account."""
    stats = emulator.stats()
    _check(stats["violations_ever"] == 0, f"{stats['violations_ever']} request bodies broke "
           f"Google's FCM v1 description: {stats['violation_samples'][:3]}")
    oauth = (f"each with an OAuth token of the stack's service account ({sum(stats['grants'].values())} "
             "grants)" if stats["oauth"] else "without OAuth")
    say(f"   every request followed Google's FCM v1 discovery document (revision "
        f"{stats['discovery_revision']}), {oauth}")


def _import_once(api: httpx.Client, devices: int, out_dir: Path) -> None:
    """Import the devices, unless this stack's data already has them: ``out_dir`` keeps a note
    of the import next to the data (``make clean`` removes both). Upserting 50,000 devices that
    exist is several times slower on nx-27017 than inserting them, and changes nothing."""
    note = out_dir / IMPORT_NOTE
    wanted = {"devices": devices, "seed": SEED}
    if note.exists() and orjson.loads(note.read_bytes()) == wanted:
        say(f"1. The {devices:,} synthetic devices are already imported (noted in {note}); "
            "the dead tokens among them were retired by the last run")
        return
    say(f"1. Importing {devices:,} synthetic devices (bulk upsert, {BULK_SIZE:,} per call)...")
    say(f"   done in {import_devices(api, synthetic_devices(devices, SEED)):.1f} s")
    out_dir.mkdir(parents=True, exist_ok=True)
    note.write_bytes(orjson.dumps(wanted))


def _mint_key(api: httpx.Client, name: str, role: str) -> str:
    response = api.post("/v1/api-keys", json={"name": name, "role": role})
    response.raise_for_status()
    return str(response.json()["secret"])


def _client_as(api: httpx.Client, key: str) -> httpx.Client:
    return httpx.Client(base_url=api.base_url, timeout=api.timeout,
                        headers={"Authorization": f"Bearer {key}"})


def _send_live_now(marketing: httpx.Client, rate_per_s: int | None) -> str:
    response = marketing.post("/v1/campaigns", json={
        "name": "Live now", "title": "We are live!",
        "body": "The stream is starting, tap to watch.",
        "data": {"landingUrl": BROKEN_URL, "campaignKind": "live"},
        "audience": {"push_enabled": True}, "rate_per_s": rate_per_s})
    response.raise_for_status()
    campaign_id = str(response.json()["id"])
    say(f"2. Marketing sends \"Live now\" ({campaign_id}) to every device with push enabled "
        "that opted in to marketing,")
    say(f"   with a broken link: landingUrl={BROKEN_URL}")
    return campaign_id


def _campaign(api: httpx.Client, campaign_id: str) -> dict[str, Any]:
    return dict(api.get(f"/v1/campaigns/{campaign_id}").raise_for_status().json())


def _follow_until(api: httpx.Client, campaign_id: str, stop_at: int) -> None:
    """Draw the progress until ``stop_at`` are sent; the campaign must still be running."""
    started, progress = time.monotonic(), _ProgressLine()
    while True:
        campaign = _campaign(api, campaign_id)
        _draw(campaign, progress)
        if campaign["counts"]["sent"] >= stop_at:
            break
        _check(campaign["status"] not in TERMINAL,
               f"\nthe campaign ended ({campaign['status']}) before {stop_at} were sent")
        _check(time.monotonic() - started < FOLLOW_UP_TIMEOUT_S,
               f"\n{stop_at} were not sent within {FOLLOW_UP_TIMEOUT_S:.0f} s")
        time.sleep(FOLLOW_POLL_S)
    _check(campaign["status"] in ("pending", "in_progress"),
           f"\nthe campaign is {campaign['status']} at {stop_at} sent: nothing left to stop")
    progress.end(f"  ({time.monotonic() - started:.1f} s)")


class _ProgressLine:
    """A terminal sees one line redrawn in place; a pipe or a log gets each different line once."""

    def __init__(self) -> None:
        self._last = ""
        self._tty = sys.stdout.isatty()

    def draw(self, line: str) -> None:
        if self._tty:
            sys.stdout.write("\r" + line)
        elif line != self._last:
            sys.stdout.write(("\n" if self._last else "") + line)
        self._last = line
        sys.stdout.flush()

    def end(self, note: str) -> None:
        say(note)


def _draw(campaign: dict[str, Any], progress: _ProgressLine) -> None:
    counts = campaign["counts"]
    done = counts["sent"] + counts["failed"]
    share = done / counts["targeted"] if counts["targeted"] else 0.0
    bar = "#" * int(share * 40)
    progress.draw(f"   [{bar:<40}] {share:6.1%}  {campaign['status']:<11} sent "
                  f"{counts['sent']:>6}  failed {counts['failed']:>5}  of {counts['targeted']:>6}")


@dataclass(frozen=True)
class _Stop:
    called_at: float
    """Epoch seconds, the emulator's clock (same machine), just before the call."""
    to_cancelled_s: float


def _stop(lead: httpx.Client, campaign_id: str, stop_at: int) -> tuple[_Stop, dict[str, Any]]:
    say(f"3. About {stop_at:,} are out when someone notices the link is broken on mobile.")
    say(f"   {LEAD.capitalize()} stops it with a responder key: POST /v1/campaigns/{{id}}/cancel")
    called_at, started = time.time(), time.monotonic()
    response = lead.post(f"/v1/campaigns/{campaign_id}/cancel",
                         json={"reason": "landingUrl is broken on mobile"})
    _check(response.status_code in (200, 202), f"the cancel was refused: {response.text}")
    campaign = dict(response.json())
    while campaign["status"] != "cancelled":
        _check(campaign["status"] == "cancelling", f"the campaign is {campaign['status']}")
        _check(time.monotonic() - started < CONFIRM_TIMEOUT_S,
               f"still cancelling {CONFIRM_TIMEOUT_S:.0f} s after the call")
        time.sleep(CONFIRM_POLL_S)
        campaign = _campaign(lead, campaign_id)
    to_cancelled_s = time.monotonic() - started
    return _Stop(called_at, to_cancelled_s), _campaign(lead, campaign_id)


def _actor_name(campaign: dict[str, Any]) -> str:
    actor = (campaign.get("cancel") or {}).get("requested_by") or {}
    return str(actor.get("name", "nobody"))


def _final_numbers(campaign: dict[str, Any]) -> Counts:
    counts = Counts.of(campaign)
    stopped_by = _actor_name(campaign)
    _check(stopped_by == LEAD, f"the cancel record names {stopped_by!r}, not {LEAD!r}")
    _check(counts.add_up, f"the numbers do not add up: {counts}")
    _check(counts.unsent > 0, "nothing was left unsent: the stop came too late")
    say(f"   cancelled by {stopped_by} (key kind {campaign['cancel']['requested_by']['kind']}):")
    say(f"     sent     {counts.sent:>7,}   got the broken link")
    say(f"     failed   {counts.failed:>7,}   dead tokens (FCM refused them; now retired)")
    say(f"     unsent   {counts.unsent:>7,}   never sent")
    say(f"     targeted {counts.targeted:>7,}   = {counts.sent:,} + {counts.failed:,} + "
        f"{counts.unsent:,}: they add up")
    return counts


def _write_audit(api: httpx.Client, campaign_id: str, counts: Counts,
                 out_dir: Path) -> dict[str, Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    files = {}
    for outcome in OUTCOMES:
        path = out_dir / f"{campaign_id}-{outcome}.ndjson"
        response = api.get(f"/v1/campaigns/{campaign_id}/recipients",
                           params={"outcome": outcome})
        path.write_bytes(response.raise_for_status().content)
        lines = _count_lines(path)
        _check(lines == getattr(counts, outcome),
               f"the {outcome} audit has {lines} lines, the campaign says {counts}")
        files[outcome] = path
    say(f"   audit (one JSON line per recipient) written to {out_dir}/:")
    for path in files.values():
        say(f"     {path.name}")
    return files


def _count_lines(path: Path) -> int:
    with path.open("rb") as lines:
        return sum(1 for line in lines if line.strip())


def _stop_timings(stop: _Stop, campaign: dict[str, Any],
                  record: list[Received]) -> StopTimings:
    last_request = max((r.received_at for r in record), default=stop.called_at)
    after = sum(1 for r in record if r.received_at > stop.called_at)
    cancel = campaign["cancel"]
    recorded_ms = None
    if cancel.get("acknowledged_at"):
        recorded = (datetime.fromisoformat(cancel["acknowledged_at"])
                    - datetime.fromisoformat(cancel["requested_at"]))
        recorded_ms = recorded.total_seconds() * 1000
    return StopTimings((last_request - stop.called_at) * 1000, after,
                       stop.to_cancelled_s * 1000, recorded_ms)


def _print_stop(timings: StopTimings) -> None:
    if timings.requests_after_call:
        say(f"   the stop: last FCM request {timings.call_to_last_fcm_ms:.0f} ms after the call "
            f"({timings.requests_after_call} requests were already on their way);")
    else:
        say("   the stop: no FCM request started after the call;")
    recorded = (f" (the campaign's record: {timings.recorded_ms:.0f} ms from request to the "
                "last pod's acknowledgement)" if timings.recorded_ms is not None else "")
    say(f"   confirmed `cancelled` with final counts {timings.call_to_cancelled_ms:.0f} ms "
        f"after the call{recorded}")


@dataclass(frozen=True)
class AuditSets:
    """The tokens of a campaign's audit, by outcome."""

    sent: frozenset[str]
    failed: frozenset[str]
    unsent: frozenset[str]

    @classmethod
    def read(cls, files: dict[str, Path]) -> AuditSets:
        return cls(*(frozenset(_tokens(files[outcome])) for outcome in OUTCOMES))


def _tokens(path: Path) -> list[str]:
    with path.open("rb") as lines:
        return [orjson.loads(line)["token"] for line in lines if line.strip()]


def _prove_original(record: list[Received], files: dict[str, Path]) -> None:
    audit = AuditSets.read(files)
    accepted = {r.token for r in record if r.accepted}
    refused = {r.token for r in record if r.reached_fcm and not r.accepted}
    _check(accepted == audit.sent, "the sent audit differs from what the emulator accepted")
    _check(refused == audit.failed, "the failed audit differs from what the emulator refused")
    _check(not (accepted | refused) & audit.unsent, "an unsent device reached the emulator")
    say("   the sent audit equals, token for token, what the FCM emulator accepted")


def _correct(marketing: httpx.Client, campaign_id: str) -> tuple[str, str]:
    say("4. Marketing corrects everyone with one call: POST /v1/campaigns/{id}/correct")
    say(f"   with landingUrl={FIXED_URL}")
    response = marketing.post(f"/v1/campaigns/{campaign_id}/correct",
                              json={"data": {"landingUrl": FIXED_URL, "campaignKind": "live"}},
                              headers={"Idempotency-Key": f"demo-correct-{campaign_id}"})
    _check(response.status_code == 202, f"the correction was refused: {response.text}")
    result = response.json()
    _check(result["retarget"] is not None and result["amend"] is not None,
           f"the correction lacks a half: {result}")
    say(f"   retarget {result['retarget']['id']}: a new notification to the "
        f"{result['retarget']['expected']:,} unsent")
    say(f"   amend    {result['amend']['id']}: a replacement for the "
        f"{result['amend']['expected']:,} who got the broken one")
    return str(result["retarget"]["id"]), str(result["amend"]["id"])


def _wait_follow_ups(api: httpx.Client, *campaign_ids: str) -> list[dict[str, Any]]:
    started, progress = time.monotonic(), _ProgressLine()
    deadline = started + FOLLOW_UP_TIMEOUT_S
    while True:
        campaigns = [_campaign(api, campaign_id) for campaign_id in campaign_ids]
        _draw_both(campaigns, progress)
        if all(c["status"] in TERMINAL for c in campaigns):
            break
        _check(time.monotonic() < deadline, "\nthe follow-ups did not finish in time")
        time.sleep(FOLLOW_POLL_S)
    progress.end(f"  ({time.monotonic() - started:.1f} s)")
    for campaign in campaigns:
        _check(campaign["status"] == "completed",
               f"follow-up {campaign['id']} ended {campaign['status']}")
        _check(campaign["data"]["landingUrl"] == FIXED_URL, "a follow-up lacks the fixed link")
    return campaigns


def _draw_both(campaigns: list[dict[str, Any]], progress: _ProgressLine) -> None:
    parts = [f"{name} {c['status']:<11} {c['counts']['sent'] + c['counts']['failed']:>6}/"
             f"{c['counts']['targeted']:<6}" for name, c in zip(("retarget", "amend"), campaigns,
                                                                 strict=True)]
    progress.draw("   " + "   ".join(parts))


# -- the proof from the emulator's record ----------------------------------------------------


def replacement_of(received: Received) -> tuple[str | None, ...]:
    """The replacement fields a request carried, in the order of :func:`expected_replacement`."""
    return (received.android_tag, received.android_collapse_key, received.apns_collapse_id,
            received.webpush_topic, received.webpush_tag)


def expected_replacement(replace_key: str) -> tuple[str, ...]:
    """What every message of a campaign with ``replace_key`` carries (Herald's payload rules)."""
    return (replace_key, replace_key, replace_key, web_push_topic(replace_key), replace_key)


def prove_correction(original: Iterable[Received], corrections: list[Received],
                     audit: AuditSets, original_key: str, retarget_key: str) -> Proof:
    """Check, from the emulator's record, that the correction reached every targeted device
    exactly once: the sent with a replacement carrying the original's key (the very fields
    their first message had), the unsent with a new message under the retarget's own key.
    ``corrections`` are the requests the emulator received after the original was cancelled.
    """
    first = {r.token: replacement_of(r) for r in original if r.accepted}
    corrections = [r for r in corrections if r.reached_fcm]
    per_device = Counter(r.token for r in corrections)
    twice = sorted(token for token, times in per_device.items() if times > 1)
    _check(not twice, f"{len(twice)} devices got two corrections, e.g. {twice[:3]}")
    _check(not audit.sent & audit.unsent, "a device is both sent and unsent")
    missing = (audit.sent | audit.unsent) - per_device.keys()
    _check(not missing, f"{len(missing)} targeted devices got no correction")
    strays = per_device.keys() - (audit.sent | audit.unsent)
    _check(not strays, f"{len(strays)} corrections went to devices that were not to get one")
    replaced = _replacements(corrections, audit.sent, first, expected_replacement(original_key))
    new, dead = _new_messages(corrections, audit.unsent, expected_replacement(retarget_key))
    return Proof(replaced, new, dead, len(audit.failed))


def _replacements(corrections: list[Received], sent: frozenset[str],
                  first: dict[str, tuple[str | None, ...]],
                  expected: tuple[str, ...]) -> int:
    amends = [r for r in corrections if r.token in sent]
    _check(all(r.accepted for r in amends), "a replacement to a device that had the original "
                                            "was refused")
    wrong = [r.token for r in amends
             if not replacement_of(r) == first.get(r.token) == expected]
    _check(not wrong, f"{len(wrong)} replacements lack the original's tag/collapse id")
    return len(amends)


def _new_messages(corrections: list[Received], unsent: frozenset[str],
                  expected: tuple[str, ...]) -> tuple[int, int]:
    news = [r for r in corrections if r.token in unsent]
    wrong = [r.token for r in news if replacement_of(r) != expected]
    _check(not wrong, f"{len(wrong)} new messages do not carry the retarget's own key")
    dead = sum(1 for r in news if not r.accepted)
    return len(news) - dead, dead


def _print_proof(proof: Proof, follow_ups: list[dict[str, Any]]) -> None:
    retarget, amend = follow_ups
    say(f"   both completed: retarget sent {retarget['counts']['sent']:,} "
        f"(failed {retarget['counts']['failed']:,}), amend sent {amend['counts']['sent']:,}")
    say("5. The FCM emulator's own record, device by device:")
    say(f"     {proof.replaced:>7,} that had the broken link got exactly one replacement, with "
        "the original's tag and collapse id")
    say(f"     {proof.new:>7,} that had nothing got exactly one new, corrected notification")
    say(f"     {0:>7,} got two corrections; {0:,} targeted devices got none")
    say(f"     dead tokens, counted as failed: {proof.dead_original:,} in the original, "
        f"{proof.dead_unsent:,} among the unsent (one refused attempt each)")
    say("   every targeted device with a live token ends with exactly one notification, the "
        "corrected one")


# -- make demo -------------------------------------------------------------------------------


def run(api_url: str, fcm_url: str, api_key: str, key_file: Path, devices: int = DEVICES,
        stop_at: int = STOP_AT, out_dir: Path = Path(".run/demo")) -> int:
    """``make demo``: tell the story on the running stack, then say where to look next."""
    started = time.monotonic()
    with httpx.Client(base_url=api_url, timeout=120,
                      headers={"Authorization": f"Bearer {api_key}"}) as api:
        emulator = EmulatorClient(fcm_url)
        try:
            run_story(api, emulator, devices, stop_at, out_dir)
        except (StoryFailed, httpx.HTTPError) as failure:
            say(f"\nherald demo: FAILED: {failure} (the services' logs are in "
                f"{out_dir.parent / 'logs'})")
            return 1
        finally:
            emulator.close()
    _print_next_steps(api_url, api_key, key_file, time.monotonic() - started)
    return 0


def _print_next_steps(api_url: str, api_key: str, key_file: Path, elapsed_s: float) -> None:
    say(f"\nThe story took {elapsed_s:.0f} s. The stack keeps running (make down stops it).")
    say(f"  console  {api_url}/console")
    say(f"  sign in with the admin key (also in {key_file}):\n    {api_key}")
