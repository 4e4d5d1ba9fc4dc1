"""``herald``: the operator's command line, a thin client of the HTTP API.

    herald campaigns cancel ID --reason "broken link"
    herald pause ID --reason "complaints"              # or: herald campaigns pause ID
    herald resume ID                                   # sends exactly the rest
    herald campaigns rate ID 500                       # a new rate while it sends
    herald campaigns create --title T --body B --lane urgent      # before everything else
    herald campaigns watch ID                          # live, over server-sent events
    herald audiences estimate --filter '{"push_enabled": true}'
    herald campaigns recipients ID --outcome unsent > unsent.ndjson
    herald campaigns retarget ID --title "Fixed link" --data landingUrl=https://...
    herald campaigns amend ID --data landingUrl=https://...      # replaces it where it was sent
    herald campaigns correct ID --body "..." --data landingUrl=https://...   # both at once

``--api`` (or ``HERALD_API_URL``) chooses the API, ``http://127.0.0.1:8000`` by default;
``--api-key`` (or ``HERALD_API_KEY``) is the key every call carries.

    herald approve ID                                  # shows what you approve, asks, sends its digest
    herald test ID --token TOKEN --token TOKEN         # or --user-id; at most 100 devices

    herald devices import devices.ndjson              # one device per line; progress on stderr
    herald keys create --name on-call --role responder --owner dana@example.com
    herald keys list
    herald keys revoke KEY_ID
"""

from __future__ import annotations

import getpass
import os
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Annotated, Any, BinaryIO, NoReturn

import httpx
import orjson
import typer
from rich.console import Console
from rich.progress import BarColumn, Progress, TaskProgressColumn, TextColumn, TimeElapsedColumn

TERMINAL = {"completed", "failed", "cancelled", "missed"}
POLL_S = 0.5

app = typer.Typer(help="Operate Herald campaigns.", no_args_is_help=True,
                  pretty_exceptions_enable=False)
campaigns = typer.Typer(help="Create, watch, cancel and follow up campaigns.", no_args_is_help=True)
app.add_typer(campaigns, name="campaigns")
console = Console()
errors = Console(stderr=True)

audiences = typer.Typer(help="Size an audience before sending to it.", no_args_is_help=True)
app.add_typer(audiences, name="audiences")

keys = typer.Typer(help="Mint, list and revoke API keys (an admin key's job).",
                   no_args_is_help=True)
app.add_typer(keys, name="keys")

devices = typer.Typer(help="Register devices (an ingest key's job).", no_args_is_help=True)
app.add_typer(devices, name="devices")

DEFAULT_API = "http://127.0.0.1:8000"
ApiOption = Annotated[str, typer.Option("--api", envvar="HERALD_API_URL", help="Herald API base URL")]
KeyOption = Annotated[str | None, typer.Option(
    "--api-key", envvar="HERALD_API_KEY", help="The API key every call carries",
    show_default=False)]


@dataclass(frozen=True)
class Endpoint:
    """Where the calls go, and the key they carry."""

    api: str
    key: str | None
    transport: httpx.BaseTransport | None = None
    """None: the network (a test may hand in another)."""

    def client(self, timeout_s: float = 30.0) -> httpx.Client:
        headers = {"Authorization": f"Bearer {self.key}"} if self.key else {}
        return httpx.Client(base_url=self.api, timeout=timeout_s, headers=headers,
                            transport=self.transport)


def _fail(message: str) -> NoReturn:
    errors.print(f"[red]error:[/red] {message}")
    raise typer.Exit(1)


def _call(target: Endpoint, method: str, path: str, **kwargs: Any) -> httpx.Response:
    """One API call; an error answer or an unreachable API ends the command with its message."""
    try:
        with target.client() as client:
            response = client.request(method, path, **kwargs)
    except httpx.HTTPError as exc:
        _fail(f"cannot reach the Herald API at {target.api}: {exc}")
    if response.status_code >= 400:
        _fail(_error_text(response))
    return response


def _error_text(response: httpx.Response) -> str:
    """What an error answer says: the API's message and code, else the start of its body."""
    try:
        error = response.json()["error"]
        return f"{error['message']} ({error['code']}, HTTP {response.status_code})"
    except (ValueError, KeyError, TypeError):
        return f"HTTP {response.status_code}: {response.text[:200]}"


def _print_json(value: Any) -> None:
    console.print_json(orjson.dumps(value).decode())


class LaneChoice(StrEnum):
    """``herald/domain/lanes.py``'s lanes, as the command line offers them."""

    URGENT = "urgent"
    STANDARD = "standard"
    BULK = "bulk"


LaneOption = Annotated[LaneChoice | None, typer.Option(
    help="Which campaigns go first: urgent (before everything; operators and admins by "
         "default), standard (the default) or bulk (what the others leave)",
    show_default=False)]
FollowUpLaneOption = Annotated[LaneChoice | None, typer.Option(
    "--lane", help="The follow-up's lane (default: the original's): urgent, standard or bulk",
    show_default=False)]


class PurposeChoice(StrEnum):
    """``herald/domain/purpose.py``'s purposes, as the command line offers them."""

    MARKETING = "marketing"
    TRANSACTIONAL = "transactional"


PurposeOption = Annotated[PurposeChoice | None, typer.Option(
    help="Why it is sent: marketing (the default: only devices opted in to marketing) or "
         "transactional (also opted-out devices with push enabled; operators and admins by "
         "default)", show_default=False)]
FollowUpPurposeOption = Annotated[PurposeChoice | None, typer.Option(
    "--purpose", help="The follow-up's purpose (default: the original's): marketing or "
                      "transactional", show_default=False)]


FrequencyCapOption = Annotated[str | None, typer.Option(
    "--frequency-cap", help="This campaign's own cap per person, marketing only: none (not "
                            "capped), or a lower one than HERALD_MARKETING_CAP such as 1/24h "
                            "(operators and admins by default)", show_default=False)]
QuietHoursOption = Annotated[str | None, typer.Option(
    "--quiet-hours", help="Marketing only: hold or skip (HERALD_QUIET_HOURS' window: its "
                          "recipients held until it ends in their timezone, or suppressed), "
                          "off, or a window of its own such as 22:00-07:00 (held) or "
                          "22:00-07:00/skip (off and own windows: operators and admins by "
                          "default)", show_default=False)]


def quiet_hours_body(choice: str) -> str | dict[str, str]:
    """``--quiet-hours`` as the API's ``quiet_hours``: a word, or a window with its mode."""
    if choice in ("hold", "skip", "off"):
        return choice
    window, _, mode = choice.partition("/")
    return {"window": window, "mode": mode or "hold"}


IncludeSuppressedOption = Annotated[bool, typer.Option(
    "--include-suppressed", help="Also the original's recipients a rule suppressed (the "
                                 "frequency cap): retarget and correct")]


def purpose_of(campaign: dict[str, Any]) -> str:
    """A campaign's purpose as printed: ``legacy`` for one created before purposes."""
    return campaign.get("purpose") or "legacy"


TranslationsOption = Annotated[str | None, typer.Option(
    help='Translations as JSON by language tag, e.g. \'{"es": {"title": "Hola", "body": "..."}}\'',
    show_default=False)]


def _parse_json(option: str, text: str) -> Any:
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        _fail(f"{option} is not JSON: {exc}")


def _parse_data(pairs: list[str]) -> dict[str, str]:
    data = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep:
            _fail(f"--data expects key=value, got {pair!r}")
        data[key] = value
    return data


@campaigns.command("show")
def show(campaign_id: str, api: ApiOption = DEFAULT_API, api_key: KeyOption = None) -> None:
    """Print a campaign with its live counts."""
    _print_json(_call(Endpoint(api, api_key), "GET", f"/v1/campaigns/{campaign_id}").json())


@campaigns.command("list")
def list_campaigns(
    api: ApiOption = DEFAULT_API, api_key: KeyOption = None,
    status: Annotated[list[str] | None, typer.Option(help="Only these statuses")] = None,
    limit: int = 20,
) -> None:
    """The newest campaigns, one line each."""
    page = _call(Endpoint(api, api_key), "GET", "/v1/campaigns",
                 params={"status": status or [], "limit": limit}).json()
    for item in page["items"]:
        console.print(campaign_line(item), highlight=False, soft_wrap=True)


def campaign_line(campaign: dict[str, Any]) -> str:
    """One campaign on one line: id, status, lane, purpose, counts, name."""
    counts = campaign["counts"]
    return (f"{campaign['id']}  {campaign['status']:<11} {campaign.get('lane', 'standard'):<8} "
            f"{purpose_of(campaign):<13} "
            f"sent {counts['sent']:>8}  failed {counts['failed']:>6}"
            f"{_suppressed(counts, '  ')}  of {counts['targeted']:>8}  {campaign['name'] or ''}")


@campaigns.command("create")
def create(
    title: Annotated[str, typer.Option()],
    body: Annotated[str, typer.Option()],
    api: ApiOption = DEFAULT_API, api_key: KeyOption = None,
    data: Annotated[list[str] | None, typer.Option(help="key=value, repeatable")] = None,
    audience: Annotated[str | None, typer.Option(help="Audience filter as JSON")] = None,
    name: str | None = None, translations: TranslationsOption = None,
    lane: LaneOption = None, purpose: PurposeOption = None,
    rate_per_s: Annotated[int | None, typer.Option(
        help="This campaign's own cap, messages a second", show_default=False)] = None,
    frequency_cap: FrequencyCapOption = None, quiet_hours: QuietHoursOption = None,
) -> None:
    """Create a campaign (sent now) and print its id (its lane and purpose on stderr)."""
    payload: dict[str, Any] = {"title": title, "body": body, "data": _parse_data(data or [])}
    given = {"frequency_cap": frequency_cap, "rate_per_s": rate_per_s, "name": name or None,
             "lane": lane.value if lane else None, "purpose": purpose.value if purpose else None,
             "quiet_hours": quiet_hours_body(quiet_hours) if quiet_hours is not None else None}
    payload.update({field: value for field, value in given.items() if value is not None})
    if translations:
        payload["translations"] = _parse_json("--translations", translations)
    if audience:
        payload["audience"] = orjson.loads(audience)
    created = _call(Endpoint(api, api_key), "POST", "/v1/campaigns", json=payload).json()
    console.print(created["id"])
    errors.print(f"{created['status']} in the {payload.get('lane', 'standard')} lane, "
                 f"{payload.get('purpose', 'marketing')}", highlight=False)


@campaigns.command("cancel")
def cancel(
    campaign_id: str,
    reason: Annotated[str | None, typer.Option(help="Why; recorded with the cancel")] = None,
    requested_by: Annotated[str | None, typer.Option(
        "--by", help="On whose behalf (default: you); the actor recorded is the key")] = None,
    api: ApiOption = DEFAULT_API, api_key: KeyOption = None,
) -> None:
    """Stop a campaign everywhere; waits for the final numbers."""
    who = requested_by or getpass.getuser()
    response = _call(Endpoint(api, api_key), "POST", f"/v1/campaigns/{campaign_id}/cancel",
                     json={"reason": reason}, headers={"X-Requested-By": who})
    result = response.json()
    if result["status"] == "cancelling":
        console.print("cancelling: every sender stops before its next FCM request...")
        result = _wait(Endpoint(api, api_key), campaign_id)
    _print_final(result)


@campaigns.command("pause")
@app.command("pause")
def pause(
    campaign_id: str,
    reason: Annotated[str | None, typer.Option(help="Why; recorded with the pause")] = None,
    api: ApiOption = DEFAULT_API, api_key: KeyOption = None,
) -> None:
    """Hold a sending campaign: every sender stops before its next FCM request; waits until
    nothing is in flight and prints the exact numbers so far."""
    target = Endpoint(api, api_key)
    result = _call(target, "POST", f"/v1/campaigns/{campaign_id}/pause",
                   json={"reason": reason}).json()
    while result["pause"] and result["pause"]["settled_at"] is None \
            and result["status"] == "paused":
        time.sleep(POLL_S / 5)
        result = _call(target, "GET", f"/v1/campaigns/{campaign_id}").json()
    _print_final(result)


@campaigns.command("resume")
@app.command("resume")
def resume(campaign_id: str, api: ApiOption = DEFAULT_API, api_key: KeyOption = None) -> None:
    """Send the rest of a paused campaign (exactly the recipients not sent yet)."""
    result = _call(Endpoint(api, api_key), "POST", f"/v1/campaigns/{campaign_id}/resume").json()
    console.print(f"{result['status']}: the rest is offered to the senders again "
                  f"(herald campaigns watch {campaign_id})", highlight=False)


@campaigns.command("rate")
def rate(campaign_id: str, rate_per_s: int, api: ApiOption = DEFAULT_API,
         api_key: KeyOption = None) -> None:
    """Change a campaign's own rate (messages a second), also while it sends."""
    result = _call(Endpoint(api, api_key), "PATCH", f"/v1/campaigns/{campaign_id}",
                   json={"rate_per_s": rate_per_s}).json()
    console.print(f"{result['status']}: rate {result['rate_per_s']}/s", highlight=False)


def _wait(target: Endpoint, campaign_id: str) -> dict[str, Any]:
    while True:
        campaign: dict[str, Any] = _call(target, "GET", f"/v1/campaigns/{campaign_id}").json()
        if campaign["status"] in TERMINAL:
            return campaign
        time.sleep(POLL_S / 5)


@campaigns.command("watch")
def watch(campaign_id: str, api: ApiOption = DEFAULT_API, api_key: KeyOption = None) -> None:
    """Follow a campaign live (server-sent events) until it reaches a final status."""
    states = _announced(campaign_states(Endpoint(api, api_key), campaign_id))
    campaign = _progress_bar(states) if console.is_terminal else _progress_lines(states)
    _print_final(campaign)


def _announced(states: Iterator[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    """``states``, after a line that names the campaign, its lane and purpose (from the first)."""
    for index, campaign in enumerate(states):
        if index == 0:
            console.print(f"{campaign.get('name') or campaign['id']}: "
                          f"{campaign.get('lane', 'standard')} lane, {purpose_of(campaign)}",
                          highlight=False)
        yield campaign


def _print_final(campaign: dict[str, Any]) -> None:
    """The final numbers, and why a campaign failed (FCM's own words when FCM refused it)."""
    counts = campaign["counts"]
    console.print(f"{campaign['status']}: sent {counts['sent']}, failed {counts['failed']}, "
                  f"unsent {counts['unsent']}{_suppressed(counts, ', ')} of "
                  f"{counts['targeted']} targeted", highlight=False, soft_wrap=True)
    if campaign.get("error"):
        console.print(f"reason: {campaign['error']}", highlight=False, markup=False)


def _progress_bar(states: Iterator[dict[str, Any]]) -> dict[str, Any]:
    columns = (TextColumn("{task.fields[status]:<11}"), BarColumn(), TaskProgressColumn(),
               TextColumn("sent {task.fields[sent]} failed {task.fields[failed]} "
                          "of {task.total}"), TimeElapsedColumn())
    campaign: dict[str, Any] = {}
    with Progress(*columns, console=console) as progress:
        task = progress.add_task("campaign", total=None, status="", sent=0, failed=0)
        for campaign in states:
            counts = campaign["counts"]
            done = counts["sent"] + counts["failed"] + counts.get("suppressed", 0)
            progress.update(task, total=counts["targeted"] or None, completed=done,
                            status=campaign["status"], sent=counts["sent"],
                            failed=counts["failed"])
    return campaign


def _progress_lines(states: Iterator[dict[str, Any]]) -> dict[str, Any]:
    """Not a terminal (a pipe, a log): one line per change instead of a bar."""
    campaign: dict[str, Any] = {}
    for campaign in states:
        counts = campaign["counts"]
        console.print(f"{campaign['status']:<11} sent {counts['sent']:>8}  failed "
                      f"{counts['failed']:>6}  unsent {counts['unsent']:>8}"
                      f"{_suppressed(counts, '  ')}  of {counts['targeted']:>8}", highlight=False,
                      soft_wrap=True)  # one line per change, however wide
    return campaign


def _suppressed(counts: dict[str, Any], separator: str) -> str:
    """The recipients a rule held back (the frequency cap), when there are any."""
    held = counts.get("suppressed") or 0
    return f"{separator}suppressed {held}" if held else ""


SSE_READ_TIMEOUT_S = 40.0
"""The API sends a comment every ~15 s on a quiet stream: silence this long is a dead link."""
SSE_RECONNECT_S = 0.5
SSE_GIVE_UP_S = 60.0
"""Reconnecting for this long without hearing an event: the API is gone; say so and stop."""


class _Dropped(Exception):
    """The stream broke off (or the API answered 5xx) before a final status."""


def campaign_states(target: Endpoint, campaign_id: str) -> Iterator[dict[str, Any]]:
    """The campaign as ``GET /v1/campaigns/{id}/events`` streams it, until a final status.

    A dropped connection is reopened (the first event of a stream is the current state, so
    nothing is missed); an error answer (unknown campaign, no key, no scope) ends the command.
    """
    heard_at = time.monotonic()
    with target.client(timeout_s=SSE_READ_TIMEOUT_S) as client:
        while True:
            try:
                for campaign in _stream_once(client, f"/v1/campaigns/{campaign_id}/events"):
                    heard_at = time.monotonic()
                    yield campaign
                    if campaign["status"] in TERMINAL:
                        return
                problem = "the stream ended before a final status"
            except (httpx.TransportError, _Dropped) as exc:
                problem = str(exc) or type(exc).__name__
            if time.monotonic() - heard_at > SSE_GIVE_UP_S:
                _fail(f"lost the event stream from {target.api}: {problem}")
            time.sleep(SSE_RECONNECT_S)


def _stream_once(client: httpx.Client, path: str) -> Iterator[dict[str, Any]]:
    with client.stream("GET", path, headers={"Accept": "text/event-stream"}) as response:
        if response.status_code >= 400:
            response.read()
            if response.status_code >= 500:
                raise _Dropped(_error_text(response))
            _fail(_error_text(response))
        for event, data in server_sent_events(response.iter_lines()):
            if event == "campaign":
                yield dict(orjson.loads(data))


def server_sent_events(lines: Iterable[str]) -> Iterator[tuple[str, str]]:
    """``(event, data)`` of each event of a ``text/event-stream`` (the WHATWG format: data
    lines joined by newlines, comments skipped, ``message`` when no event type is named)."""
    event, data = "message", list[str]()
    for line in lines:
        if not line:
            if data:
                yield event, "\n".join(data)
            event, data = "message", []
            continue
        name, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if name == "event":
            event = value
        elif name == "data":
            data.append(value)


@campaigns.command("recipients")
def recipients(
    campaign_id: str,
    outcome: Annotated[str, typer.Option(help="sent, failed, unsent or suppressed")] = "sent",
    api: ApiOption = DEFAULT_API, api_key: KeyOption = None,
) -> None:
    """The audit: one JSON line per recipient with the given outcome."""
    path = f"/v1/campaigns/{campaign_id}/recipients"
    try:
        with Endpoint(api, api_key).client() as client, client.stream(
                "GET", path, params={"outcome": outcome}) as response:
            if response.status_code >= 400:
                response.read()
                _fail(response.json()["error"]["message"])
            for chunk in response.iter_bytes():
                sys.stdout.buffer.write(chunk)
    except httpx.HTTPError as exc:
        _fail(f"cannot reach the Herald API at {api}: {exc}")


TitleOption = Annotated[str | None, typer.Option(help="New title (default: the original's)")]
BodyOption = Annotated[str | None, typer.Option(help="New body (default: the original's)")]
DataOption = Annotated[list[str] | None, typer.Option(
    help="key=value, repeatable; replaces the original's data")]
ImageOption = Annotated[str | None, typer.Option("--image-url", help="New image URL")]
IdempotencyOption = Annotated[str | None, typer.Option(
    "--idempotency-key", help="Run the command again with the same key: the same follow-ups "
                              "come back instead of new ones", show_default=False)]


def _follow_up_body(title: str | None, body: str | None, data: list[str] | None,
                    image_url: str | None, translations: str | None = None,
                    lane: LaneChoice | None = None,
                    purpose: PurposeChoice | None = None, frequency_cap: str | None = None,
                    include_suppressed: bool = False) -> dict[str, Any]:
    given: dict[str, Any] = {
        "purpose": purpose.value if purpose else None, "frequency_cap": frequency_cap,
        "include_suppressed": include_suppressed or None,
        "title": title, "body": body, "image_url": image_url,
        "data": _parse_data(data) if data else None,
        "translations": _parse_json("--translations", translations) if translations else None,
        "lane": lane.value if lane else None}
    return {key: value for key, value in given.items() if value is not None}


def _follow_up(target: Endpoint, campaign_id: str, action: str, payload: dict[str, Any],
               idempotency_key: str | None) -> dict[str, Any]:
    headers = {"Idempotency-Key": idempotency_key} if idempotency_key else {}
    answer: dict[str, Any] = _call(target, "POST", f"/v1/campaigns/{campaign_id}/{action}",
                                   json=payload, headers=headers).json()
    return answer


def _print_created(answer: dict[str, Any]) -> None:
    console.print(answer["id"])


def _print_correction(answer: dict[str, Any]) -> None:
    for half, meaning in (("retarget", "new notification to the unsent"),
                          ("amend", "replacement for the sent")):
        made = answer[half]
        if made is None:
            console.print(f"{half:<8} none: nobody in that group", highlight=False)
        else:
            console.print(f"{half:<8} {made['id']}  {made['expected']:>8} recipients  "
                          f"({meaning})", highlight=False)


def _follow_up_command(action: str, summary: str,
                       show: Callable[[dict[str, Any]], None]) -> None:
    """``herald campaigns <action>``: the three follow-ups take the same options (typer reads
    them from the signature) and differ in the endpoint and what they print."""
    @campaigns.command(action, help=summary)
    def follow_up(
        campaign_id: str,
        api: ApiOption = DEFAULT_API, api_key: KeyOption = None,
        title: TitleOption = None, body: BodyOption = None, data: DataOption = None,
        image_url: ImageOption = None, idempotency_key: IdempotencyOption = None,
        translations: TranslationsOption = None, lane: FollowUpLaneOption = None,
        purpose: FollowUpPurposeOption = None, frequency_cap: FrequencyCapOption = None,
        include_suppressed: IncludeSuppressedOption = False,
    ) -> None:
        show(_follow_up(Endpoint(api, api_key), campaign_id, action,
                        _follow_up_body(title, body, data, image_url, translations, lane,
                                        purpose, frequency_cap, include_suppressed),
                        idempotency_key))


_follow_up_command(
    "retarget", "Send a follow-up to exactly the recipients a finished campaign did not reach.",
    _print_created)
_follow_up_command(
    "amend", "Replace a finished campaign's notification on every device FCM accepted it for.",
    _print_created)
_follow_up_command(
    "correct", "Correct a finished campaign: a new notification to its unsent recipients and a "
               "replacement to its sent ones, in one call; prints both follow-ups.",
    _print_correction)


@audiences.command("estimate")
def estimate(
    filter_json: Annotated[str, typer.Option(
        "--filter", help='Audience filter as JSON, as in campaigns create, e.g. '
                         '\'{"push_enabled": true, "topics": ["live"]}\'')] = "{}",
    api: ApiOption = DEFAULT_API, api_key: KeyOption = None,
    languages: Annotated[list[str] | None, typer.Option(
        "--language", help="A translation's tag, repeatable: the devices split by language")
    ] = None,
    lane: LaneOption = None, purpose: PurposeOption = None,
    rate_per_s: Annotated[int | None, typer.Option(
        help="The campaign's own cap, for the forecast", show_default=False)] = None,
) -> None:
    """How many devices an audience reaches now, before anything is sent to it, and when a
    campaign to it created now would reach its last recipient (on stderr)."""
    audience = _parse_json("--filter", filter_json)
    body: dict[str, Any] = {"audience": audience, "languages": languages or []}
    if lane is not None:
        body["lane"] = lane.value
    if purpose is not None:
        body["purpose"] = purpose.value
    if rate_per_s is not None:
        body["rate_per_s"] = rate_per_s
    answer = _call(Endpoint(api, api_key), "POST", "/v1/audiences/estimate", json=body).json()
    console.print(f"{answer['devices']} devices", highlight=False)
    for variant, count in sorted((answer.get("by_language") or {}).items()):
        console.print(f"  {variant:<12} {count}", highlight=False)
    errors.print(forecast_line(answer, body.get("lane", "standard")), highlight=False)


def forecast_line(answer: dict[str, Any], lane: str) -> str:
    """When a campaign would be done, and what that rests on."""
    rate = (f"{answer.get('fleet_rate_per_s', 0):,.0f}/s "
            f"{'measured' if answer.get('fleet_rate_measured') else 'assumed'}")
    ahead = f"{answer.get('recipients_ahead', 0):,} recipients ahead of it"
    took_s = answer.get("finishes_in_s")
    if took_s is None:
        return f"in the {lane} lane it would not be sent now (fleet {rate}; {ahead})"
    return f"in the {lane} lane: done in about {took_s:,.0f} s (fleet {rate}; {ahead})"


def approval_lines(campaign: dict[str, Any]) -> list[str]:
    """What an approver is shown before approving: everything the approval covers."""
    lines = [f"campaign  {campaign['id']}  {campaign.get('name') or ''}  ({campaign['status']})",
             f"title     {campaign['title']}", f"body      {campaign['body']}"]
    lines += [f"data      {key} = {value}" for key, value in (campaign.get("data") or {}).items()]
    if campaign.get("image_url"):
        lines.append(f"image     {campaign['image_url']}")
    for tag, text in (campaign.get("translations") or {}).items():
        lines.append(f"[{tag}]      {text.get('title')} — {text.get('body')}")
    if campaign.get("options"):
        lines.append(f"options   {orjson.dumps(campaign['options']).decode()}")
    follow_up = campaign.get("retarget")
    reach = (f"the {follow_up['outcome']} recipients of {follow_up['campaign_id']}" if follow_up
             else orjson.dumps(campaign.get("audience") or {}).decode())
    lines.append(f"reaches   {reach}: {campaign.get('audience_estimate')} devices")
    rate = campaign.get("rate_per_s")
    lines.append(f"rate      {f'{rate}/s' if rate else 'uncapped'}; lane {campaign.get('lane')}; "
                 f"purpose {purpose_of(campaign)}")
    if campaign.get("rollout"):
        waves = ", ".join(f"{w['percent']}% (hold {w['hold_s']:.0f} s)"
                          for w in campaign["rollout"]["waves"])
        lines.append(f"rollout   {waves}")
    lines.append(f"sends at  {campaign.get('due_at')}")
    lines.append(f"digest    {campaign['content_digest']}")
    return lines


@app.command("approve")
def approve(campaign_id: str, api: ApiOption = DEFAULT_API, api_key: KeyOption = None,
            yes: Annotated[bool, typer.Option(
                "--yes", help="Approve what is shown without asking")] = False) -> None:
    """Show what a campaign awaiting approval would send, and approve exactly that (its digest
    is sent: refused if it changed since). A person other than whoever created it or changed
    it since its last approval must approve it."""
    target = Endpoint(api, api_key)
    shown = _call(target, "GET", f"/v1/campaigns/{campaign_id}").json()
    for line in approval_lines(shown):
        console.print(line, highlight=False, markup=False)
    if not yes and not typer.confirm("Approve exactly this?"):
        _fail("not approved")
    campaign = _call(target, "POST", f"/v1/campaigns/{campaign_id}/approve",
                     json={"digest": shown["content_digest"]}).json()
    approval = campaign["approval"] or {}
    console.print(f"{campaign['id']} approved by {approval.get('by', {}).get('name')} at "
                  f"{approval.get('at')}: now {campaign['status']}", highlight=False)


@app.command("test")
def send_test(
    campaign_id: str, api: ApiOption = DEFAULT_API, api_key: KeyOption = None,
    token: Annotated[list[str] | None, typer.Option(help="A device token, repeatable")] = None,
    user_id: Annotated[list[str] | None, typer.Option(
        help="A user id (each of their devices), repeatable")] = None,
) -> None:
    """Send the campaign's exact message to a few devices (at most 100), and show each one's
    outcome; recorded apart, never in the campaign's numbers."""
    if bool(token) == bool(user_id):
        _fail("give --token or --user-id (repeatable), not both")
    body = {"tokens": token} if token else {"user_ids": user_id}
    result = _call(Endpoint(api, api_key), "POST", f"/v1/campaigns/{campaign_id}/test",
                   json=body).json()
    for outcome in result["outcomes"]:
        verdict = "accepted" if outcome["accepted"] else outcome["error"]
        console.print(f"…{outcome['token_suffix']}  {outcome['user_id'] or '-':<16} {verdict}",
                      highlight=False)
    console.print(f"{result['accepted']} accepted, {result['failed']} refused", highlight=False)


@app.command("pods")
def pods(api: ApiOption = DEFAULT_API, api_key: KeyOption = None) -> None:
    """Live pods, from their heartbeats."""
    for pod in _call(Endpoint(api, api_key), "GET", "/v1/pods").json()["pods"]:
        console.print(f"{pod['service']:<11} {pod['id']:<40} beat {pod['age_s']:.1f}s ago  "
                      f"working on {len(pod['campaigns'])} campaigns")


@keys.command("create")
def create_key(
    name: Annotated[str, typer.Option(help="Who or what the key is for")],
    role: Annotated[str, typer.Option(help="viewer, responder, operator, ingest or admin")],
    expires_at: Annotated[datetime | None, typer.Option(
        help="ISO 8601 instant with an offset; never when omitted")] = None,
    owner: Annotated[str | None, typer.Option(
        help="The person it is for (a login or e-mail address; a person's keys are one person "
             "for approval); omitted: yours")] = None,
    api: ApiOption = DEFAULT_API, api_key: KeyOption = None,
) -> None:
    """Mint a key and print its secret (shown this once)."""
    body: dict[str, Any] = {"name": name, "role": role}
    if expires_at is not None:
        body["expires_at"] = expires_at.isoformat()
    if owner is not None:
        body["owner"] = owner
    created = _call(Endpoint(api, api_key), "POST", "/v1/api-keys", json=body).json()
    errors.print(f"key {created['id']} ({created['role']}) of {created['owner']}; its secret, "
                 "shown once:")
    console.print(created["secret"], highlight=False)


@keys.command("list")
def list_keys(api: ApiOption = DEFAULT_API, api_key: KeyOption = None) -> None:
    """Every key: id, owner, name, role, last use, expiry, revocation (never a secret)."""
    for key in _call(Endpoint(api, api_key), "GET", "/v1/api-keys").json()["items"]:
        state = f"revoked {key['revoked_at']}" if key["revoked_at"] else (
            f"expires {key['expires_at']}" if key["expires_at"] else "active")
        console.print(f"{key['id']:<24}  {key['owner']:<24}  {key['role']:<9}  "
                      f"{key['name']:<24}  last used {key['last_used_at'] or 'never'}  {state}",
                      highlight=False, markup=False)


@keys.command("revoke")
def revoke_key(key_id: str, api: ApiOption = DEFAULT_API, api_key: KeyOption = None) -> None:
    """Revoke a key: every api replica refuses it within a second."""
    revoked = _call(Endpoint(api, api_key), "DELETE", f"/v1/api-keys/{key_id}").json()
    console.print(f"revoked {revoked['id']} ({revoked['name']}) at {revoked['revoked_at']}")


NDJSON = "application/x-ndjson"
READ_BYTES = 256 * 1024
PROGRESS_EVERY_S = 1.0
IMPORT_TIMEOUT_S = 300.0
"""The longest the api may take to read on, or to answer once the file is sent (its last
batch written): generous, as a database busy with other work slows both."""
SOME_INVALID = 2
"""Exit status of an import that had invalid lines (the valid ones are imported)."""


class ImportProgress:
    """Lines and bytes sent so far, told on stderr at most once every ``PROGRESS_EVERY_S``."""

    def __init__(self, total_bytes: int | None) -> None:
        self.lines = 0
        self.sent_bytes = 0
        self._total = total_bytes
        self._started = self._told = time.monotonic()

    def sent(self, chunk: bytes) -> None:
        self.lines += chunk.count(b"\n")
        self.sent_bytes += len(chunk)
        if time.monotonic() - self._told >= PROGRESS_EVERY_S:
            self.tell()

    def tell(self) -> None:
        self._told = time.monotonic()
        share = f" ({self.sent_bytes / self._total:.0%})" if self._total else ""
        rate = self.lines / max(self._told - self._started, 1e-6)
        errors.print(f"sent {self.lines:,} lines{share}, {rate:,.0f} lines/s",
                     highlight=False, soft_wrap=True)


def _file_chunks(source: BinaryIO, progress: ImportProgress) -> Iterator[bytes]:
    while chunk := source.read(READ_BYTES):
        yield chunk
        progress.sent(chunk)


def _send_import(target: Endpoint, source: BinaryIO, size: int | None) -> httpx.Response:
    progress = ImportProgress(size)
    headers = {"Content-Type": NDJSON}
    if size is not None:  # a length lets the api refuse a file over its limit before a byte
        headers["Content-Length"] = str(size)
    try:
        with target.client(timeout_s=IMPORT_TIMEOUT_S) as client:
            response = client.post("/v1/devices/import", headers=headers,
                                   content=_file_chunks(source, progress))
    except httpx.HTTPError as exc:
        _fail(f"the import stopped after {progress.lines:,} lines sent: {exc}")
    progress.tell()
    return response


@devices.command("import")
def import_devices(
    path: Annotated[str, typer.Argument(
        metavar="FILE", help="NDJSON, one device per line as in POST /v1/devices/bulk; - "
                             "reads standard input")],
    api: ApiOption = DEFAULT_API, api_key: KeyOption = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the api's answer as JSON")] = False,
) -> None:
    """Import a file of devices (upsert by token), streamed to the api as it is read: progress
    on stderr, the counts (inserted, updated, unchanged, invalid) and each invalid line's
    number on stdout. Importing the same file again changes nothing. Exit status 2 when some
    lines were invalid (the others are imported)."""
    target = Endpoint(api, api_key)
    if path == "-":
        response = _send_import(target, sys.stdin.buffer, None)
    else:
        try:
            with open(path, "rb") as source:
                response = _send_import(target, source, os.fstat(source.fileno()).st_size)
        except OSError as exc:
            _fail(f"cannot read {path}: {exc.strerror or exc}")
    if response.status_code >= 400:
        _fail(_error_text(response))
    answer = response.json()
    if as_json:
        _print_json(answer)
    else:
        _print_import(answer)
    if answer["invalid"]:
        raise typer.Exit(SOME_INVALID)


def _print_import(answer: dict[str, Any]) -> None:
    lines = f"{answer['lines']:,} line{'' if answer['lines'] == 1 else 's'}"
    console.print(f"{lines}: {answer['inserted']:,} inserted, "
                  f"{answer['updated']:,} updated, {answer['unchanged']:,} unchanged, "
                  f"{answer['invalid']:,} invalid", highlight=False, soft_wrap=True)
    for problem in answer["problems"]:
        console.print(f"line {problem['line']}: {problem['code']}: {problem['message']}",
                      highlight=False, markup=False, soft_wrap=True)
    if answer["problems_omitted"]:
        console.print(f"({answer['problems_omitted']:,} more invalid lines not listed)",
                      highlight=False, soft_wrap=True)


def main() -> None:
    app()
