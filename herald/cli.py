"""``herald``: the operator's command line, a thin client of the HTTP API.

    herald campaigns cancel ID --reason "broken link"
    herald campaigns watch ID
    herald campaigns recipients ID --outcome unsent > unsent.ndjson
    herald campaigns retarget ID --title "Fixed link" --data landingUrl=https://...

``--api`` (or ``HERALD_API_URL``) chooses the API, ``http://127.0.0.1:8000`` by default.
"""

from __future__ import annotations

import getpass
import sys
import time
from typing import Annotated, Any, NoReturn

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

ApiOption = Annotated[str, typer.Option("--api", envvar="HERALD_API_URL", help="Herald API base URL")]


def _client(api: str) -> httpx.Client:
    return httpx.Client(base_url=api, timeout=30.0)


def _fail(message: str) -> NoReturn:
    errors.print(f"[red]error:[/red] {message}")
    raise typer.Exit(1)


def _call(api: str, method: str, path: str, **kwargs: Any) -> httpx.Response:
    """One API call; an error answer or an unreachable API ends the command with its message."""
    try:
        with _client(api) as client:
            response = client.request(method, path, **kwargs)
    except httpx.HTTPError as exc:
        _fail(f"cannot reach the Herald API at {api}: {exc}")
    if response.status_code >= 400:
        try:
            error = response.json()["error"]
            _fail(f"{error['message']} ({error['code']}, HTTP {response.status_code})")
        except (ValueError, KeyError, TypeError):
            _fail(f"HTTP {response.status_code}: {response.text[:200]}")
    return response


def _print_json(value: Any) -> None:
    console.print_json(orjson.dumps(value).decode())


def _parse_data(pairs: list[str]) -> dict[str, str]:
    data = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep:
            _fail(f"--data expects key=value, got {pair!r}")
        data[key] = value
    return data


@campaigns.command("show")
def show(campaign_id: str, api: ApiOption = "http://127.0.0.1:8000") -> None:
    """Print a campaign with its live counts."""
    _print_json(_call(api, "GET", f"/v1/campaigns/{campaign_id}").json())


@campaigns.command("list")
def list_campaigns(
    api: ApiOption = "http://127.0.0.1:8000",
    status: Annotated[list[str] | None, typer.Option(help="Only these statuses")] = None,
    limit: int = 20,
) -> None:
    """The newest campaigns, one line each."""
    page = _call(api, "GET", "/v1/campaigns", params={"status": status or [], "limit": limit}).json()
    for item in page["items"]:
        counts = item["counts"]
        console.print(f"{item['id']}  {item['status']:<11} sent {counts['sent']:>8}  failed "
                      f"{counts['failed']:>6}  of {counts['targeted']:>8}  {item['name'] or ''}")


@campaigns.command("create")
def create(
    title: Annotated[str, typer.Option()],
    body: Annotated[str, typer.Option()],
    api: ApiOption = "http://127.0.0.1:8000",
    data: Annotated[list[str] | None, typer.Option(help="key=value, repeatable")] = None,
    audience: Annotated[str | None, typer.Option(help="Audience filter as JSON")] = None,
    name: str | None = None,
) -> None:
    """Create a campaign (sent now) and print its id."""
    payload: dict[str, Any] = {"title": title, "body": body, "data": _parse_data(data or [])}
    if name:
        payload["name"] = name
    if audience:
        payload["audience"] = orjson.loads(audience)
    created = _call(api, "POST", "/v1/campaigns", json=payload).json()
    console.print(created["id"])


@campaigns.command("cancel")
def cancel(
    campaign_id: str,
    reason: Annotated[str | None, typer.Option(help="Why; recorded with the cancel")] = None,
    requested_by: Annotated[str | None, typer.Option("--by", help="Who asks (default: you)")] = None,
    api: ApiOption = "http://127.0.0.1:8000",
) -> None:
    """Stop a campaign everywhere; waits for the final numbers."""
    who = requested_by or getpass.getuser()
    response = _call(api, "POST", f"/v1/campaigns/{campaign_id}/cancel",
                     json={"reason": reason}, headers={"X-Requested-By": who})
    result = response.json()
    if result["status"] == "cancelling":
        console.print("cancelling: every sender stops before its next FCM request...")
        result = _wait(api, campaign_id)
    counts = result["counts"]
    console.print(f"{result['status']}: sent {counts['sent']}, failed {counts['failed']}, "
                  f"unsent {counts['unsent']} of {counts['targeted']} targeted")


def _wait(api: str, campaign_id: str) -> dict[str, Any]:
    while True:
        campaign: dict[str, Any] = _call(api, "GET", f"/v1/campaigns/{campaign_id}").json()
        if campaign["status"] in TERMINAL:
            return campaign
        time.sleep(POLL_S / 5)


@campaigns.command("watch")
def watch(campaign_id: str, api: ApiOption = "http://127.0.0.1:8000") -> None:
    """A live progress bar until the campaign reaches a final status."""
    columns = (TextColumn("{task.fields[status]:<11}"), BarColumn(), TaskProgressColumn(),
               TextColumn("sent {task.fields[sent]} failed {task.fields[failed]} "
                          "of {task.total}"), TimeElapsedColumn())
    with Progress(*columns, console=console) as progress:
        task = progress.add_task("campaign", total=None, status="", sent=0, failed=0)
        while True:
            campaign = _call(api, "GET", f"/v1/campaigns/{campaign_id}").json()
            counts = campaign["counts"]
            progress.update(task, total=counts["targeted"] or None,
                            completed=counts["sent"] + counts["failed"], status=campaign["status"],
                            sent=counts["sent"], failed=counts["failed"])
            if campaign["status"] in TERMINAL:
                break
            time.sleep(POLL_S)
    console.print(f"{campaign['status']}: unsent {counts['unsent']}")


@campaigns.command("recipients")
def recipients(
    campaign_id: str,
    outcome: Annotated[str, typer.Option(help="sent, failed or unsent")] = "sent",
    api: ApiOption = "http://127.0.0.1:8000",
) -> None:
    """The audit: one JSON line per recipient with the given outcome."""
    path = f"/v1/campaigns/{campaign_id}/recipients"
    try:
        with _client(api) as client, client.stream(
                "GET", path, params={"outcome": outcome}) as response:
            if response.status_code >= 400:
                response.read()
                _fail(response.json()["error"]["message"])
            for chunk in response.iter_bytes():
                sys.stdout.buffer.write(chunk)
    except httpx.HTTPError as exc:
        _fail(f"cannot reach the Herald API at {api}: {exc}")


@campaigns.command("retarget")
def retarget(
    campaign_id: str,
    api: ApiOption = "http://127.0.0.1:8000",
    title: str | None = None,
    body: str | None = None,
    data: Annotated[list[str] | None, typer.Option(help="key=value, repeatable")] = None,
) -> None:
    """Send a follow-up to exactly the recipients a finished campaign did not reach."""
    payload: dict[str, Any] = {"title": title, "body": body}
    if data:
        payload["data"] = _parse_data(data)
    created = _call(api, "POST", f"/v1/campaigns/{campaign_id}/retarget",
                    json={k: v for k, v in payload.items() if v is not None}).json()
    console.print(created["id"])


@app.command("pods")
def pods(api: ApiOption = "http://127.0.0.1:8000") -> None:
    """Live pods, from their heartbeats."""
    for pod in _call(api, "GET", "/v1/pods").json()["pods"]:
        console.print(f"{pod['service']:<11} {pod['id']:<40} beat {pod['age_s']:.1f}s ago  "
                      f"working on {len(pod['campaigns'])} campaigns")


def main() -> None:
    app()
