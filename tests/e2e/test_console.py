"""The operator console in a real browser (Debian's chromium, driven by Playwright) against the
services as separate processes: issue 11's story told through the console. An operator sends to
10,000 devices, watches it move, stops it, gets numbers equal to the API's, downloads the unsent
audit, sends the rest with a corrected link, and corrects everyone on another stopped campaign;
a viewer sees no Stop button and is refused a direct cancel.

Screenshots of every page go to ``.run/screenshots/`` (1280x800) for a person to look at."""

from __future__ import annotations

import asyncio
import csv
import json
import re
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

import aio_pika
import pytest
from playwright.sync_api import Browser, Page, expect, sync_playwright

from devstack.processes import free_port
from devstack.stack import Stack
from fcm_emulator.client import EmulatorClient
from herald.clock import utcnow
from herald.domain.payload import LONGEST_DEFAULT_KEY, build_payload, payload_size
from tests.e2e.harness import Api, reachable_devices
from tests.support import wait_for

pytestmark = pytest.mark.browser

POPULATION = 10_000
OPTED_OUT = 25
"""Devices with push enabled that did not opt in to marketing: no campaign here reaches them."""
SLOW_FCM_MS = 20
RATE_PER_S = 2_000
"""The campaign's own cap, so a person (and this test) has time to press Stop mid-flight."""
BROKEN = "https://example.com/live-broken"
FIXED = "https://example.com/live"
CHROMIUM = "/usr/bin/chromium"
SCREENSHOTS = Path(__file__).resolve().parents[2] / ".run" / "screenshots"
VIEWPORT = {"width": 1280, "height": 800}
UI_TIMEOUT_MS = 15_000
CANCEL_TIMEOUT_S = 30
CAMPAIGN_URL = re.compile(r"#/campaigns/([0-9a-f]{24})$")
OWLS = 20
"""The quiet-hours test's people: the first half in Seoul, the rest in London."""
CAPPED = 4
"""Of London's half, those who already had the one marketing push a day the cap allows."""
SEOUL = ZoneInfo("Asia/Seoul")
OPERATOR_ZONE = "America/New_York"
"""The operator's own clock, neither the devices' nor UTC: the console shows both."""


@pytest.fixture(scope="module")
def console_stack(module_stack: Stack) -> Stack:
    module_stack.start(senders=2, schedulers=0)
    return module_stack


@pytest.fixture(scope="module")
def admin(console_stack: Stack) -> Iterator[Api]:
    api = Api(console_stack.config.api_url, console_stack.config.api_key)
    api.import_devices(reachable_devices(POPULATION))
    api.import_devices([{**{k: v for k, v in device.items() if k != "user_id"},  # nobody's
                         "token": f"{device['token']}-no-ads", "marketing_enabled": False}
                        for device in reachable_devices(OPTED_OUT)])
    yield api
    api.http.close()


@pytest.fixture(scope="module")
def operator_key(admin: Api) -> str:
    return admin.mint_key("operator", "marketing")


@pytest.fixture(scope="module")
def fcm(console_stack: Stack) -> Iterator[EmulatorClient]:
    client = EmulatorClient(console_stack.config.fcm_url)
    yield client
    client.close()


@pytest.fixture(scope="module")
def browser(console_stack: Stack) -> Iterator[Browser]:
    """Chromium for the module. It depends on the stack only to be closed before it: Playwright's
    event loop must be gone when the stack's teardown runs its own."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    expect.set_options(timeout=UI_TIMEOUT_MS)
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=CHROMIUM, args=[
            "--no-sandbox", "--disable-gpu", "--disable-background-networking",
            "--disable-component-update", "--no-first-run"])
        yield launched
        launched.close()


@pytest.fixture
def pages(browser: Browser, console_stack: Stack) -> Iterator[PageMaker]:
    maker = PageMaker(browser, console_stack.config.api_url)
    yield maker
    maker.close()


class PageMaker:
    """Browser tabs signed in with a key, each in its own context (its own sessionStorage)."""

    def __init__(self, browser: Browser, api_url: str) -> None:
        self._browser = browser
        self._api_url = api_url
        self._contexts: list[object] = []

    def signed_in(self, key: str, shot: str | None = None,
                  timezone_id: str | None = None) -> Page:
        context = self._browser.new_context(viewport=VIEWPORT, locale="en-US",
                                            timezone_id=timezone_id, accept_downloads=True)
        self._contexts.append(context)
        page = context.new_page()
        page.set_default_timeout(UI_TIMEOUT_MS)
        page.goto(f"{self._api_url}/console/")
        page.fill("#api-key", key)
        if shot:
            screenshot(page, shot)
        page.click("button[type=submit]")
        expect(page.locator("#who")).to_be_visible()
        return page

    def open(self, page: Page, hash_path: str) -> None:
        page.goto(f"{self._api_url}/console/{hash_path}")

    def close(self) -> None:
        for context in self._contexts:
            context.close()  # type: ignore[attr-defined]


def screenshot(page: Page, name: str) -> None:
    page.screenshot(path=str(SCREENSHOTS / f"{name}.png"))


def shown_count(page: Page, which: str) -> int:
    return int(page.locator(f"#count-{which}").inner_text().replace(",", ""))


def campaign_id_of(page: Page) -> str:
    found = CAMPAIGN_URL.search(page.url)
    assert found is not None, page.url
    return found.group(1)


def create_in_the_console(page: Page, name: str) -> str:
    page.click("#nav a[data-page=new]")
    page.fill("#name", name)
    page.fill("#title", "We are live!")
    page.fill("#body", "Tap to watch the stream")
    page.locator(".data-key").first.fill("landing_url")
    expect(page.locator("#data-errors")).to_contain_text("did you mean “landingUrl”")
    page.locator(".data-key").first.fill("landingUrl")
    page.locator(".data-value").first.fill("x" * 4_000)
    expect(page.locator("#data-errors")).to_contain_text("FCM accepts at most 4,096")
    page.locator(".data-value").first.fill(BROKEN)
    expect(page.locator("#data-errors")).to_be_empty()
    size = payload_size(build_payload("We are live!", "Tap to watch the stream",
                                      {"landingUrl": BROKEN}, replace_key=LONGEST_DEFAULT_KEY))
    expect(page.locator("#payload-size")).to_have_text(f"{size:,} of 4,096 bytes")
    page.fill("#rate", str(RATE_PER_S))
    expect(page.locator("#estimate")).to_have_text(f"This will reach {POPULATION:,} devices.")
    expect(page.locator("#held-back li[data-rule=marketing_opt_out]")).to_have_text(
        f"{OPTED_OUT} more held back: not opted in to marketing.")
    # Issue 29: the key's lanes (an operator may send urgent by default), standard chosen, and
    # the forecast before the Send button, for this audience at this cap.
    expect(page.locator("#lane input[type=radio]")).to_have_count(3)
    expect(page.locator("#lane-standard")).to_be_checked()
    # Issue 32: the key's purposes (an operator may send transactional by default), marketing
    # chosen; the estimate above counts the devices a marketing campaign reaches.
    expect(page.locator("#purpose option")).to_have_count(2)
    expect(page.locator("#purpose")).to_have_value("marketing")
    expect(page.locator("#forecast")).to_contain_text(
        re.compile(r"Sent now in the standard lane, the last device gets it in about \d+ s"))
    page.locator("#create").scroll_into_view_if_needed()
    screenshot(page, "new-campaign")
    page.click("#create")
    page.wait_for_url(CAMPAIGN_URL)
    return campaign_id_of(page)


def stop_in_the_console(page: Page, name: str) -> None:
    page.click("#stop")
    dialog = page.locator("#stop-dialog")
    expect(dialog).to_contain_text(f"Stop “{name}”?")
    expect(dialog.locator("#still-to-go")).to_contain_text("still to go")
    expect(page.locator("#keep-sending")).to_be_focused()  # Enter keeps sending
    screenshot(page, "stop-dialog")
    page.click("#confirm-stop")


def download_unsent(page: Page, campaign_id: str) -> list[dict[str, str]]:
    with page.expect_download() as started:
        page.click("button[data-outcome=unsent][data-format=csv]")
    download = started.value
    assert download.suggested_filename == f"campaign-{campaign_id}-unsent.csv"
    with open(download.path(), newline="") as audit:
        return list(csv.DictReader(audit))


def test_an_operator_stops_a_campaign_downloads_the_unsent_and_sends_them_the_fix(
        pages: PageMaker, admin: Api, operator_key: str, fcm: EmulatorClient) -> None:
    fcm.configure(latency_ms=SLOW_FCM_MS)
    page = pages.signed_in(operator_key, shot="sign-in")
    campaign_id = create_in_the_console(page, "live-now")
    expect(page.locator(".lane[data-lane=standard]")).to_be_visible()
    expect(page.locator(".purpose[data-purpose=marketing]")).to_be_visible()
    wait_for(lambda: shown_count(page, "sent") > 0, 30, "the first sends to show")
    first = shown_count(page, "sent")
    wait_for(lambda: shown_count(page, "sent") > first, 10, "the progress to move")
    expect(page.locator("#eta")).to_contain_text("Last recipient expected in ")
    page.evaluate("window.scrollTo(0, 0)")  # the form's scroll stays after the navigation
    screenshot(page, "campaign-sending")

    stop_in_the_console(page, "live-now")
    # The API first: a slow confirmation on a loaded machine is not the console's failure.
    counts = admin.wait_until(campaign_id, {"cancelled"}, timeout_s=CANCEL_TIMEOUT_S)["counts"]
    summary = page.locator("#stopped-summary")
    expect(summary).to_be_visible()
    expect(page.locator("#eta")).to_be_hidden()
    assert 0 < counts["sent"] < POPULATION and counts["unsent"] > 0
    expect(summary).to_contain_text(
        f"Stopped: {counts['sent']:,} sent, {counts['unsent']:,} not sent")
    assert [summary.get_attribute(f"data-{k}") for k in ("sent", "unsent", "failed")] == [
        str(counts[k]) for k in ("sent", "unsent", "failed")]
    expect(page.locator("#timeline li[data-step='Cancel requested']")).to_contain_text("marketing")
    screenshot(page, "campaign-stopped")

    unsent = download_unsent(page, campaign_id)
    assert len(unsent) == counts["unsent"]
    assert [row["token"] for row in unsent] == admin.audit_tokens(campaign_id, "unsent")

    fcm.configure(latency_ms=0)
    page.click("#send-rest")
    expect(page.locator("#title")).to_have_value("We are live!")
    expect(page.locator(".data-value").first).to_have_value(BROKEN)
    expect(page.locator("#reach")).to_contain_text(f"This will reach {counts['unsent']:,} devices")
    page.locator(".data-value").first.fill(FIXED)
    page.locator("#follow-up-send").scroll_into_view_if_needed()
    screenshot(page, "send-the-rest")
    page.click("#follow-up-send")
    page.wait_for_url(lambda url: CAMPAIGN_URL.search(url) is not None
                      and campaign_id not in url)
    rest = admin.wait_finished(campaign_id_of(page), timeout_s=60)
    assert rest["data"] == {"landingUrl": FIXED}
    assert (rest["status"], rest["counts"]["targeted"], rest["counts"]["sent"]) == (
        "completed", counts["unsent"], counts["unsent"])
    expect(page.locator("#count-sent")).to_have_text(f"{counts['unsent']:,}")

    page.click("#nav a[data-page=campaigns]")
    row = page.locator(f"#campaigns tr[data-id='{campaign_id}']")
    expect(row).to_contain_text("cancelled")
    expect(row.locator(".lane")).to_have_text("standard")
    screenshot(page, "campaigns")


def test_correct_everyone_on_a_stopped_campaign(pages: PageMaker, admin: Api,
                                                operator_key: str, fcm: EmulatorClient) -> None:
    fcm.configure(latency_ms=SLOW_FCM_MS)
    original = admin.create_campaign(name="second-link", title="Replay",
                                     data={"landingUrl": BROKEN}, rate_per_s=RATE_PER_S)
    wait_for(lambda: admin.campaign(original)["counts"]["sent"] >= 1_000, 30,
             "the campaign to be sending")
    assert admin.http.post(f"/v1/campaigns/{original}/cancel").status_code == 202
    counts = admin.wait_until(original, {"cancelled"}, timeout_s=CANCEL_TIMEOUT_S)["counts"]
    fcm.configure(latency_ms=0)

    page = pages.signed_in(operator_key)
    pages.open(page, f"#/campaigns/{original}")
    expect(page.locator("#stopped-summary")).to_be_visible()
    page.click("#correct-everyone")
    page.locator(".data-value").first.fill(FIXED)
    expect(page.locator("#reach")).to_contain_text(
        f"{counts['unsent']:,} devices get it as a new notification; "
        f"{counts['sent']:,} that got the original get it as its replacement")
    page.click("#follow-up-send")
    result = page.locator("#follow-up-result")
    expect(result.locator("[data-half=retarget]")).to_contain_text(f"{counts['unsent']:,}")
    expect(result.locator("[data-half=amend]")).to_contain_text(f"{counts['sent']:,}")
    expect(result.locator("[data-half=amend] .languages")).to_have_text(
        f" (by language: default {counts['sent']:,})")
    result.scroll_into_view_if_needed()
    screenshot(page, "correct-everyone")
    halves = {half: result.locator(f"[data-half={half}] a").inner_text()
              for half in ("retarget", "amend")}
    assert admin.campaign(original)["amended_by"] == [halves["amend"]]
    for half in ("retarget", "amend"):
        assert admin.campaign(halves[half])["data"] == {"landingUrl": FIXED}
        # Stopped rather than followed to the end (tests/e2e/test_correct.py does that), so that
        # they cost the module's remaining tests and its teardown nothing.
        admin.http.post(f"/v1/campaigns/{halves[half]}/cancel")


def test_a_viewer_sees_no_stop_button_and_a_direct_cancel_is_refused(
        pages: PageMaker, admin: Api, operator_key: str) -> None:
    later = admin.create_campaign(name="tomorrow-morning",
                                  send_at=(utcnow() + timedelta(hours=12)).isoformat())
    operator = pages.signed_in(operator_key)
    pages.open(operator, f"#/campaigns/{later}")
    expect(operator.locator("#stop")).to_be_visible()

    viewer_key = admin.mint_key("viewer", "watcher")
    viewer = pages.signed_in(viewer_key)
    pages.open(viewer, f"#/campaigns/{later}")
    expect(viewer.locator("#count-targeted")).to_be_visible()
    expect(viewer.locator("#timeline")).to_contain_text("Created")
    expect(viewer.locator("#stop")).to_have_count(0)
    expect(viewer.locator("#nav a[data-page=new]")).to_be_hidden()
    screenshot(viewer, "viewer-campaign")
    as_viewer = admin.as_key(viewer_key)
    refused = as_viewer.http.post(f"/v1/campaigns/{later}/cancel")
    as_viewer.http.close()
    assert refused.status_code == 403
    assert admin.campaign(later)["status"] == "scheduled"


async def publish_cancel(url: str, body: bytes) -> None:
    """Publish to herald.cancel as an outside tool would, without a ``user_id``."""
    connection = await aio_pika.connect(url)
    async with connection:
        channel = await connection.channel()
        exchange = await channel.get_exchange("herald.cancel", ensure=False)
        await exchange.publish(aio_pika.Message(body), routing_key="")


def test_an_unverified_amqp_actor_is_shown_as_unverified(
        pages: PageMaker, admin: Api, operator_key: str, console_stack: Stack) -> None:
    """Issue 21: a cancel published without ``user_id`` names its sender itself, and that name
    (here one that looks like the admin key) read as a verified actor in the console."""
    later = admin.create_campaign(name="forged-actor",
                                  send_at=(utcnow() + timedelta(hours=12)).isoformat())
    body = json.dumps({"campaign_id": later, "requested_by": "bootstrap (key bootstrap)"})
    url = console_stack.config.cancel_rabbitmq_url
    assert url is not None
    with ThreadPoolExecutor(1) as thread:  # away from Playwright's own event loop
        thread.submit(asyncio.run, publish_cancel(url, body.encode())).result(timeout=30)
    wait_for(lambda: admin.campaign(later)["status"] == "cancelled", 30, "the AMQP cancel")
    assert admin.campaign(later)["cancel"]["requested_by"]["verified"] is False
    page = pages.signed_in(operator_key)
    pages.open(page, f"#/campaigns/{later}")
    step = page.locator("#timeline li[data-step='Cancel requested']")
    expect(step).to_contain_text("by amqp:bootstrap (key bootstrap)")
    expect(step.locator(".unverified")).to_have_text("unverified: self-declared sender")


def test_schedules_pause_and_resume_and_pods_show_their_heartbeats(
        pages: PageMaker, admin: Api, operator_key: str) -> None:
    made = admin.http.post("/v1/schedules", json={
        "name": "monday-digest", "cron": "0 9 * * MON", "timezone": "Asia/Seoul",
        "template": {"title": "Your week", "body": "Five stories", "lane": "bulk"}})
    assert made.status_code == 201, made.text
    schedule_id = made.json()["id"]
    page = pages.signed_in(operator_key)
    page.click("#nav a[data-page=schedules]")
    row = page.locator(f"#schedules tr[data-id='{schedule_id}']")
    expect(row).to_contain_text(made.json()["next_run_local"])
    expect(row.locator(".lane")).to_have_text("bulk")
    row.get_by_role("button", name="Pause").click()
    expect(row).to_contain_text("paused")
    assert admin.http.get(f"/v1/schedules/{schedule_id}").json()["state"] == "paused"
    screenshot(page, "schedules")
    row.get_by_role("button", name="Resume").click()
    expect(row).to_contain_text("active")

    page.click("#nav a[data-page=pods]")
    for service in ("api", "dispatcher", "sender"):
        expect(page.locator(f"#pods tr[data-service={service}]").first).to_be_visible()
    expect(page.locator("#pods tr[data-service=sender]")).to_have_count(2)
    screenshot(page, "pods")


def test_a_campaign_fcm_refused_shows_why_in_googles_words(
        pages: PageMaker, admin: Api, fcm: EmulatorClient, operator_key: str) -> None:
    fcm.configure(fail_all={"error": "PERMISSION_DENIED"})
    try:
        campaign_id = admin.create_campaign(name="wrong-project")
        campaign = admin.wait_finished(campaign_id)
    finally:
        fcm.configure(fail_all=None)
    assert campaign["status"] == "failed"
    page = pages.signed_in(operator_key)
    pages.open(page, f"#/campaigns/{campaign_id}")
    reason = page.locator("#failure-reason")
    expect(reason).to_contain_text("Stopped by Herald")
    expect(reason).to_contain_text("PERMISSION_DENIED")
    expect(reason).to_contain_text("cloudmessaging.messages.create")
    expect(page.locator("#timeline")).to_contain_text("FCM refused the campaign")
    screenshot(page, "campaign-refused-by-fcm")


def test_the_preview_beside_the_editor_shows_one_devices_language_and_name(
        pages: PageMaker, admin: Api, operator_key: str) -> None:
    token = "preview-es-mx-" + "x" * 40
    admin.import_devices([{"token": token, "user_id": "ana", "platform": "android",
                           "locale": "es-MX", "topics": ["preview"],
                           "attributes": {"first_name": "Ana"}},
                          {"token": "preview-fr-" + "x" * 40, "platform": "ios", "locale": "fr",
                           "topics": ["preview"]}])
    page = pages.signed_in(operator_key)
    page.click("#nav a[data-page=new]")
    page.fill("#title", 'Hi {{ attributes.first_name | default("there") }}')
    page.fill("#body", "We are live")
    page.click("#add-translation")
    page.locator(".tr-tag").first.fill("es")
    page.locator(".tr-title").first.fill('Hola {{ attributes.first_name | default("amigo") }}')
    page.locator(".tr-body").first.fill("Estamos en vivo")
    page.fill("#topics", "preview")
    expect(page.locator("#estimate")).to_have_text(
        re.compile(r"This will reach 2 devices: (es 1, default 1|default 1, es 1)\."))
    page.fill("#preview-device", token)
    page.click("#show-preview")
    expect(page.locator("#preview-variant")).to_have_text("es")
    expect(page.locator("#preview-title")).to_have_text("Hola Ana")
    expect(page.locator("#preview-body")).to_have_text("Estamos en vivo")
    message = json.loads(page.locator("#preview-message").inner_text())["message"]
    assert message["token"] == "…" + token[-8:]  # a preview masks the token (issue 31)
    assert message["android"]["collapse_key"] == LONGEST_DEFAULT_KEY
    page.locator("#preview").scroll_into_view_if_needed()
    screenshot(page, "preview")
    page.fill("#preview-device", "user:nobody")
    page.click("#show-preview")
    expect(page.locator("#preview-result")).to_contain_text("device_not_found")


def test_a_large_campaign_is_approved_by_a_second_key_after_a_test_send(
        browser: Browser, admin: Api, console_stack: Stack, fcm: EmulatorClient) -> None:
    """Issue 24: a second api replica holds sends to at least 2 devices for approval. The
    creator sees the campaign awaiting approval, cannot approve it (the button is disabled,
    with why), test-sends it to one user's device and sees the outcome; a second operator
    approves it and the timeline says who; a viewer has no button at all."""
    port = free_port()
    console_stack.start_service("api", "api-approval", HERALD_API_PORT=str(port),
                                HERALD_APPROVAL_MIN_AUDIENCE="2")
    url = f"http://127.0.0.1:{port}"
    pages = PageMaker(browser, url)
    holding = Api(url, console_stack.config.api_key)
    try:
        marketing_key = holding.mint_key("operator", "marketing-2", owner="marketing-2")
        reviewer_key = holding.mint_key("operator", "reviewer", owner="reviewer")
        viewer_key = holding.mint_key("viewer", "watcher-2")
        marketing = holding.as_key(marketing_key)
        campaign_id = marketing.create_campaign(
            name="big-launch", audience={"user_ids": ["user-1", "user-2", "user-3"]},
            data={"landingUrl": FIXED})
        marketing.http.close()
        fcm.reset()

        creator = pages.signed_in(marketing_key)
        pages.open(creator, f"#/campaigns/{campaign_id}")
        expect(creator.locator(".status.awaiting_approval")).to_have_text("awaiting approval")
        expect(creator.locator("#approve")).to_be_disabled()
        expect(creator.locator("#approve-hint")).to_contain_text("another operator or an admin")
        expect(creator.locator("#approval-content")).to_contain_text(FIXED)
        expect(creator.locator("#approval-content")).to_contain_text("marketing — only devices")
        screenshot(creator, "approval-awaiting")
        creator.select_option("#test-kind", "user_ids")
        creator.fill("#test-targets", "user-2")
        creator.click("#test-send")
        expect(creator.locator("#test-summary")).to_have_text("1 accepted, 0 refused")
        expect(creator.locator("#test-result tr.accepted")).to_have_count(1)
        creator.locator("#test-result").scroll_into_view_if_needed()
        screenshot(creator, "test-send")
        assert [r.token for r in fcm.received()] == [admin_token_of(admin, "user-2")]

        viewer = pages.signed_in(viewer_key)
        pages.open(viewer, f"#/campaigns/{campaign_id}")
        expect(viewer.locator("#approval")).to_contain_text("Awaiting approval")
        expect(viewer.locator("#approve")).to_have_count(0)

        reviewer = pages.signed_in(reviewer_key)
        pages.open(reviewer, f"#/campaigns/{campaign_id}")
        expect(reviewer.locator("#approve")).to_be_enabled()
        reviewer.click("#approve")
        expect(reviewer.locator("#timeline li[data-step='Approved']")).to_contain_text("reviewer")
        expect(reviewer.locator(".status.completed")).to_be_visible()
        screenshot(reviewer, "approved-by-a-second-key")
        finished = holding.wait_finished(campaign_id, timeout_s=30)
        assert (finished["approval"]["by"]["name"], finished["counts"]["sent"]) == ("reviewer", 3)
    finally:
        pages.close()
        holding.http.close()
        console_stack.processes.pop("api-approval").terminate(timeout_s=15)


def admin_token_of(admin: Api, user_id: str) -> str:
    """The token of ``user_id``'s device (the audit lists none yet: read it back as its
    campaign's sent list would, from the devices the module imported)."""
    index = int(user_id.split("-")[1])
    return str(reachable_devices(index + 1)[index]["token"])


def test_an_operator_pauses_a_rollout_in_its_hold_and_resumes_it(
        pages: PageMaker, admin: Api, operator_key: str, fcm: EmulatorClient) -> None:
    """Issue 24 in the console: the waves, the hold's countdown and the gate of a staged
    rollout; Pause shows the exact numbers so far; Resume starts the next wave at once."""
    fcm.configure(latency_ms=0)
    campaign_id = admin.create_campaign(name="staged", rate_per_s=5_000, rollout={
        "waves": [{"percent": 5, "hold_s": 60}, {"percent": 100}],
        "halt_when": {"failure_rate_above": 0.05, "min_attempts": 50}})
    page = pages.signed_in(operator_key)
    pages.open(page, f"#/campaigns/{campaign_id}")
    expect(page.locator("#hold-countdown")).to_contain_text("next wave in")
    expect(page.locator("#waves li[data-wave='1']")).to_contain_text("holding")
    expect(page.locator("#gate")).to_contain_text("halts above 5.0%")
    screenshot(page, "rollout-hold")

    page.click("#pause")
    summary = page.locator("#paused-summary")
    expect(summary).to_contain_text("not sent yet")
    counts = admin.campaign(campaign_id)["counts"]
    assert 0 < counts["sent"] < POPULATION // 10
    expect(summary).to_contain_text(f"{counts['sent']:,} sent, {counts['unsent']:,} not sent yet")
    expect(page.locator("#timeline li[data-step='Pause requested']")).to_contain_text("marketing")
    expect(page.locator("#resume")).to_be_visible()
    screenshot(page, "campaign-paused")

    page.click("#resume")
    finished = admin.wait_finished(campaign_id, timeout_s=60)
    # The campaign reaches every device of the module's stack (other tests add a few).
    assert finished["status"] == "completed"
    assert finished["counts"]["sent"] == finished["counts"]["targeted"] >= POPULATION
    expect(page.locator("#timeline li[data-step='Resumed']")).to_contain_text("marketing")
    expect(page.locator("#pause")).to_be_hidden()


def test_urgent_is_offered_only_to_the_roles_allowed_and_shown_wherever_the_campaign_is(
        browser: Browser, admin: Api, console_stack: Stack) -> None:
    """Issue 29: an api where only admins may send urgent (HERALD_URGENT_ROLES=admin). An
    operator is offered standard and bulk, and told why not urgent; an admin is offered all
    three, sends an urgent campaign from the console, and sees its lane on the campaign and in
    the list."""
    port = free_port()
    console_stack.start_service("api", "api-lanes", HERALD_API_PORT=str(port),
                                HERALD_URGENT_ROLES="admin")
    url = f"http://127.0.0.1:{port}"
    pages = PageMaker(browser, url)
    try:
        operator = pages.signed_in(admin.mint_key("operator", "marketing-3"))
        operator.click("#nav a[data-page=new]")
        expect(operator.locator("#lane input[type=radio]")).to_have_count(2)
        expect(operator.locator("#lane-urgent")).to_have_count(0)
        expect(operator.locator("#lane-urgent-hint")).to_be_visible()

        page = pages.signed_in(console_stack.config.api_key)
        page.click("#nav a[data-page=new]")
        page.fill("#name", "outage-notice")
        page.fill("#title", "Service outage")
        page.fill("#body", "We are on it; next update in 30 minutes")
        page.fill("#user-ids", "user-1, user-2")
        page.check("#lane-urgent")
        expect(page.locator("#forecast")).to_contain_text("Sent now in the urgent lane")
        page.locator("#create").scroll_into_view_if_needed()
        screenshot(page, "new-urgent-campaign")
        page.click("#create")
        page.wait_for_url(CAMPAIGN_URL)
        campaign_id = campaign_id_of(page)
        expect(page.locator(".lane[data-lane=urgent]")).to_be_visible()
        assert admin.wait_finished(campaign_id, timeout_s=30)["lane"] == "urgent"
        page.click("#nav a[data-page=campaigns]")
        row = page.locator(f"#campaigns tr[data-id='{campaign_id}']")
        expect(row.locator(".lane")).to_have_text("urgent")
        expect(row.locator(".purpose")).to_have_text("marketing")  # shown wherever a campaign is
        screenshot(page, "campaigns-lanes")
    finally:
        pages.close()
        console_stack.processes.pop("api-lanes").terminate(timeout_s=15)


def test_suppressed_recipients_are_shown_beside_sent_failed_and_unsent(
        pages: PageMaker, admin: Api, operator_key: str) -> None:
    """Issue 32, point 2: a second campaign capped at one a day to the same 20 people holds all
    of them back; the console counts them apart, in the list and on the campaign's page, and
    offers their audit."""
    audience = {"user_ids": [f"user-{i}" for i in range(9_980, 10_000)]}
    first = admin.create_campaign(audience=audience, frequency_cap="1/24h")
    assert admin.wait_finished(first, timeout_s=30)["counts"]["sent"] == 20
    second = admin.create_campaign(audience=audience, frequency_cap="1/24h")
    assert admin.wait_finished(second, timeout_s=30)["counts"]["suppressed"] == 20
    page = pages.signed_in(operator_key)
    pages.open(page, f"#/campaigns/{second}")
    expect(page.locator("#count-suppressed")).to_have_text("20")
    assert [shown_count(page, k) for k in ("targeted", "sent", "failed", "unsent")] == [
        20, 0, 0, 0]
    expect(page.locator("button[data-outcome=suppressed][data-format=csv]")).to_be_visible()
    screenshot(page, "campaign-suppressed")
    page.click("#nav a[data-page=campaigns]")
    cells = page.locator(f"#campaigns tr[data-id='{second}'] td.num")
    expect(cells).to_have_text(["0", "0", "0", "20", "20"])

    # Nobody unsent: "the rest" is the held back, asked for (include_suppressed); the follow-up
    # keeps the original's cap, so they are held back again, and counted.
    pages.open(page, f"#/campaigns/{second}")
    page.click("#send-rest")
    expect(page.locator("#include-suppressed")).to_be_checked()
    expect(page.locator("#reach")).to_have_text(
        "This will reach 20 devices: everyone this campaign did not send to, the held back "
        "included.")
    page.click("#follow-up-send")
    page.wait_for_url(lambda url: bool(CAMPAIGN_URL.search(url)) and second not in url)
    follow_up = admin.wait_finished(campaign_id_of(page), timeout_s=30)
    assert follow_up["retarget"] == {"campaign_id": second, "outcome": "unsent"}
    assert (follow_up["counts"]["targeted"], follow_up["counts"]["suppressed"]) == (20, 20)


def seoul_window(ahead_s: float) -> tuple[str, datetime]:
    """A quiet window from an hour ago to ``ahead_s`` from now on Seoul's clock (London, eight
    or nine hours behind, is outside it), and when it ends."""
    now = datetime.now(SEOUL).replace(microsecond=0)
    end = now + timedelta(seconds=ahead_s)
    return f"{now - timedelta(hours=1):%H:%M:%S}-{end:%H:%M:%S}", end


def compose_for_the_owls(page: Page, name: str, quiet_window: str, mode: str) -> None:
    """The new-campaign form for the owls, with quiet hours of its own."""
    page.click("#nav a[data-page=new]")
    page.fill("#name", name)
    page.fill("#title", "Late-night sale")
    page.fill("#body", "Half price until dawn")
    page.fill("#topics", "night-owls")
    page.select_option("#quiet-hours", "window")
    page.fill("#quiet-window", quiet_window)
    page.select_option("#quiet-mode", mode)


def held_back_figure(page: Page, rule: str) -> int:
    return int(page.locator(f"#held-back li[data-rule={rule}]").get_attribute("data-count") or -1)


def test_the_estimate_names_what_quiet_hours_and_the_cap_hold_back_and_the_send_does_it(
        pages: PageMaker, admin: Api, operator_key: str, fcm: EmulatorClient) -> None:
    """Issue 32, points 2, 3 and 5 in the console: 20 people, half in Seoul inside a quiet window
    of the campaign's own, 4 in London already capped. An operator skips the window and sets a
    cap of 1/24h: the lines under the count say 10 skipped and 4 capped, and the send suppresses
    exactly those. Then one that holds: 10 held until the window ends (the operator's time and
    UTC), London sent, the campaign shows until when; a cancel leaves the held 10 unsent."""
    fcm.configure(latency_ms=0)
    owls = [{**device, "token": f"{device['token']}-owl", "user_id": f"owl-{i}",
             "topics": ["night-owls"], "timezone": "Asia/Seoul" if i < OWLS // 2 else "Europe/London"}
            for i, device in enumerate(reachable_devices(OWLS))]
    admin.import_devices(owls)
    seoul = {d["token"] for d in owls if d["timezone"] == "Asia/Seoul"}
    earlier = admin.create_campaign(audience={"user_ids": [f"owl-{i}" for i in range(
        OWLS // 2, OWLS // 2 + CAPPED)]}, frequency_cap="1/24h")
    assert admin.wait_finished(earlier, timeout_s=30)["counts"]["sent"] == CAPPED

    page = pages.signed_in(operator_key, timezone_id=OPERATOR_ZONE)
    quiet, _ = seoul_window(600)
    compose_for_the_owls(page, "owls-skip", quiet, "skip")
    page.select_option("#purpose", "transactional")  # neither held nor capped: no such choice
    expect(page.locator("#person-rules")).to_be_hidden()
    expect(page.locator("#held-back li")).to_have_count(0)
    page.select_option("#purpose", "marketing")
    page.select_option("#frequency-cap", "own")
    page.fill("#frequency-cap-own", "1/24h")
    expect(page.locator("#estimate")).to_have_text(f"This will reach {OWLS} devices.")
    expect(page.locator("#held-back li[data-rule=quiet_hours_skipped]")).to_have_text(
        f"{OWLS // 2} of them suppressed: inside quiet hours in their time zone, skipped.")
    expect(page.locator("#held-back li[data-rule=frequency_cap]")).to_have_text(
        f"{CAPPED} of them suppressed by the frequency cap (as of now: other campaigns move it).")
    skipped, capped = (held_back_figure(page, rule) for rule in ("quiet_hours_skipped", "frequency_cap"))
    page.locator("#create").scroll_into_view_if_needed()
    screenshot(page, "new-campaign-skip-and-cap")
    page.click("#create")
    page.wait_for_url(CAMPAIGN_URL)
    skipping = campaign_id_of(page)
    done = admin.wait_finished(skipping, timeout_s=30)
    assert (done["status"], done["counts"]["sent"], done["counts"]["suppressed"]) == (
        "completed", OWLS - skipped - capped, skipped + capped)
    assert Counter(line["rule"] for line in admin.audit(skipping, "suppressed")) == {
        "quiet_hours": skipped, "frequency_cap": capped}
    expect(page.locator("#count-suppressed")).to_have_text(str(skipped + capped))
    expect(page.locator("#count-sent")).to_have_text(str(OWLS - skipped - capped))
    expect(page.locator("#quiet-hours-shown")).to_have_text(
        f"Quiet hours: {done['quiet_hours']['window']}, skipped (suppressed), in each device's "
        "time zone (else UTC).")
    expect(page.locator("#frequency-cap-shown")).to_have_text("Frequency cap: 1/24h, with Herald's.")

    quiet, ends = seoul_window(3600)
    compose_for_the_owls(page, "owls-hold", quiet, "hold")
    until = f"your time ({ends.astimezone(UTC):%Y-%m-%d %H:%M:%S} UTC)"
    line = page.locator("#held-back li[data-rule=quiet_hours_held]")
    expect(line).to_contain_text(f"{OWLS // 2} of them held by quiet hours in their time zone until ")
    expect(line).to_contain_text(until)
    expect(page.locator("#held-back li[data-rule=frequency_cap]")).to_have_text(
        "Frequency cap: it holds back none of them now.")  # none set on this stack
    held = held_back_figure(page, "quiet_hours_held")
    forecast_until = re.search(r"until (.*), sent then\.$", line.inner_text())
    assert forecast_until is not None
    page.locator("#create").scroll_into_view_if_needed()
    screenshot(page, "new-campaign-quiet-hours")
    page.click("#create")
    page.wait_for_url(lambda url: bool(CAMPAIGN_URL.search(url)) and skipping not in url)
    holding = campaign_id_of(page)
    wait_for(lambda: admin.campaign(holding)["counts"]["sent"] == OWLS - held, 30,
             "the half outside quiet hours to be sent")
    expect(page.locator("#quiet-until")).to_have_text(
        f"Held by quiet hours until {forecast_until.group(1)}: devices in Asia/Seoul, targeted then.")
    expect(page.locator("#count-sent")).to_have_text(str(OWLS - held))
    page.evaluate("window.scrollTo(0, 0)")
    screenshot(page, "campaign-held-by-quiet-hours")
    assert admin.http.post(f"/v1/campaigns/{holding}/cancel").status_code == 202
    stopped = admin.wait_until(holding, {"cancelled"}, timeout_s=CANCEL_TIMEOUT_S)["counts"]
    assert (stopped["sent"], stopped["unsent"], stopped["suppressed"]) == (OWLS - held, held, 0)
    expect(page.locator("#count-unsent")).to_have_text(str(held))
    expect(page.locator("#quiet-until")).to_have_text(
        f"Quiet hours held part of it until {forecast_until.group(1)}: devices in Asia/Seoul.")
    assert not seoul & {r.token for r in fcm.received()}  # neither skipped nor held was sent
