"""What does a personalised, translated campaign cost the sender per recipient? ``python -m
bench.personalize``

Issue 25 asks for the sender's CPU per recipient with templates, measured against plain content.
The work measured is what a sender does per recipient to have its request body, and nothing else
(no network, no RabbitMQ, no MongoDB): the same ``--devices`` devices (163-character tokens,
locales spread over the translations and others, two attributes) go through each row:

- ``MessageTemplate.body_for`` (**baseline**): today's sender, one pre-encoded message for the
  whole campaign and a token spliced in per recipient;
- ``plain, 2 translations``: ``CompiledContent.message_for`` on content without placeholders
  with two translations: the locale's variant (remembered per locale) and its pre-encoded body;
- ``placeholders, 2 translations``: the same with two placeholders in the title and two in the
  body of every variant: each recipient's words rendered by Jinja2 and its notification and data
  encoded.
- ``sender's targets(), ...`` (the wired path): ``herald.service_layer.sending.chunk.targets`` on
  chunk messages of 500 recipients as the dispatcher writes them (a profile on each recipient of
  a per-device campaign, none on a plain one's), then each target's body as the window takes it
  (its own, or the shared one's ``body_for``): what the sender does per recipient before the
  request, plain against placeholders and translations.

``--ttl-s`` gives every row's content a TTL, so each body carries an APNs expiry counted from
the moment the body is made for the wire (issue 30): the shared message's and every rendered
one's expiry spliced in per request, as the window does (``WireBody.at``, ``body_for``).

The rows alternate ``--runs`` times in one process pinned to one CPU; CPU time is the process's
own (``time.process_time``), so other work on the machine changes it little. The table has the
median per row, its range and the ratio to the baseline; the machine's load average before and
after is printed beside it, because the numbers of a loaded machine are worth less.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, NamedTuple

from bench.common import format_table, machine, results_path, source_version, write_json
from herald.domain.messages import Profile, ProfileNeed, Recipient, SendChunk
from herald.domain.payload import (
    MessageTemplate,
    SendOptions,
    build_payload,
    default_replace_key,
    expires_after_s,
)
from herald.domain.rendering import CompiledContent, Translation, compile_content
from herald.service_layer.sending.chunk import targets

REPLACE_KEY = default_replace_key("6b0137d0eaff6ead39685496")
DATA = {"landingUrl": "https://example.com/live/2026-11", "kind": "live"}
PLAIN = ("Live now", "The stream has started: tap to watch")
PLAIN_TRANSLATIONS = {
    "es": Translation(title="En vivo", body="La transmisión empezó: toca para verla"),
    "pt-BR": Translation(title="Ao vivo", body="A transmissão começou: toque para assistir"),
}
PERSONAL = (
    'Hi {{ attributes.first_name | default("there") }}, live from '
    '{{ attributes.city | default("our studio") }}',
    'The stream has started on your {{ platform }}, {{ attributes.first_name | default("friend") '
    '| title }}: tap to watch',
)
PERSONAL_TRANSLATIONS = {
    "es": Translation(
        title='Hola {{ attributes.first_name | default("") }}, en vivo desde '
              '{{ attributes.city | default("el estudio") }}',
        body='La transmisión empezó en tu {{ platform }}, {{ attributes.first_name | '
             'default("amigo") | title }}: toca para verla'),
    "pt-BR": Translation(
        title='Olá {{ attributes.first_name | default("") }}, ao vivo de '
              '{{ attributes.city | default("nosso estúdio") }}',
        body='A transmissão começou no seu {{ platform }}, {{ attributes.first_name | '
             'default("amigo") | title }}: toque para assistir'),
}
LOCALES = ("es-MX", "es", "pt-BR", "en-US", "fr-FR", "de", None)
NAMES = ("ana", "Bruno", "", "Chloé", "dmitri")


class Device(NamedTuple):
    token: str
    platform: str
    user_id: str | None
    locale: str | None
    timezone: str | None
    attributes: dict[str, Any]


def devices(count: int) -> list[Device]:
    """Tokens as long as FCM's, locales over the translations and beyond, some names missing."""
    return [Device(f"bench-{i:07d}-" + "x" * 150, ("android", "ios")[i % 2], f"u{i}",
                   LOCALES[i % len(LOCALES)], None,
                   {"first_name": NAMES[i % len(NAMES)], "city": "Lisbon"} if i % 3 else {})
            for i in range(count)]


def content(words: tuple[str, str], translations: dict[str, Translation],
            options: SendOptions | None) -> CompiledContent:
    return compile_content(*words, DATA, translations, replace_key=REPLACE_KEY, options=options)


Row = Callable[[list[Device]], int]


def baseline_row(options: SendOptions | None) -> Row:
    template = MessageTemplate(build_payload(*PLAIN, DATA, replace_key=REPLACE_KEY,
                                             options=options), expires_after_s(options))

    def row(recipients: list[Device]) -> int:
        return sum(len(template.body_for(device.token, time.time())) for device in recipients)
    return row


def compiled_row(compiled: CompiledContent) -> Row:
    def row(recipients: list[Device]) -> int:
        sent = 0
        for device in recipients:
            body = compiled.message_for(device.token, device).body
            sent += len(body.at(time.time())) if body is not None else 0
        return sent
    return row


CHUNK = 500


def chunks(recipients: list[Device], need: ProfileNeed | None) -> list[SendChunk]:
    """The recipients as the dispatcher's chunk messages, parsed as the sender parses them."""
    def recipient(device: Device) -> Recipient:
        profile = None if need is None else Profile(
            platform=device.platform, locale=device.locale, timezone=device.timezone,
            attributes={k: v for k, v in device.attributes.items() if k in need.attributes})
        return Recipient(token=device.token, user_id=device.user_id, profile=profile)
    return [SendChunk.model_validate_json(SendChunk(
        campaign_id="6b0137d0eaff6ead39685496", seq=start // CHUNK,
        recipients=[recipient(d) for d in recipients[start:start + CHUNK]]
    ).model_dump_json(exclude_none=True)) for start in range(0, len(recipients), CHUNK)]


def sender_row(compiled: CompiledContent, need: ProfileNeed | None) -> Row:
    """The wired path: ``targets`` per chunk, then each body as the window takes it."""
    prepared: dict[int, list[SendChunk]] = {}

    def row(recipients: list[Device]) -> int:
        if len(recipients) not in prepared:  # parsed once, outside the runs that count
            prepared[len(recipients)] = chunks(recipients, need)
        messages = prepared[len(recipients)]
        shared, sent = compiled.shared, 0
        for chunk in messages:
            for target in targets(chunk, {}, compiled)[0]:
                now_s = time.time()  # as the window dates each request
                body = (target.body.at(now_s) if target.body is not None
                        else shared.body_for(target.token, now_s))  # type: ignore[union-attr]
                sent += len(body)
        return sent
    return row


def rows(options: SendOptions | None = None) -> dict[str, Row]:
    """Each row's campaign is compiled outside the timing: a sender does it once per campaign
    (and the chunk messages are parsed outside it: that cost is RabbitMQ's row in the pipeline)."""
    personal = content(PERSONAL, PERSONAL_TRANSLATIONS, options)
    return {"MessageTemplate.body_for (baseline)": baseline_row(options),
            "plain, 2 translations": compiled_row(content(PLAIN, PLAIN_TRANSLATIONS, options)),
            "placeholders 2+2, 2 translations": compiled_row(personal),
            "sender's targets(), plain": sender_row(content(PLAIN, {}, options), None),
            "sender's targets(), placeholders 2+2, 2 translations": sender_row(
                personal, ProfileNeed(personal.attribute_names))}


def cpu_us_per_recipient(row: Row, recipients: list[Device]) -> float:
    started = time.process_time()
    row(recipients)
    return 1e6 * (time.process_time() - started) / len(recipients)


def measure(recipients: list[Device], runs: int,
            options: SendOptions | None = None) -> dict[str, list[float]]:
    every = rows(options)
    measured: dict[str, list[float]] = {name: [] for name in every}
    for row in every.values():  # warm-up: the locales remembered, Jinja2's code paths warm
        row(recipients[:1000])
    for _ in range(runs):
        for name, row in every.items():
            measured[name].append(cpu_us_per_recipient(row, recipients))
    return measured


def report(measured: dict[str, list[float]]) -> list[dict[str, Any]]:
    base = statistics.median(next(iter(measured.values())))
    return [{"row": name, "median_us": statistics.median(runs), "min_us": min(runs),
             "max_us": max(runs), "ratio": statistics.median(runs) / base, "runs_us": runs}
            for name, runs in measured.items()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--devices", type=int, default=50_000)
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--cpu", type=int, default=0, help="the CPU the bench is pinned to")
    parser.add_argument("--ttl-s", type=int, default=None,
                        help="give the content this TTL: each body carries its own APNs expiry")
    parser.add_argument("--output", type=Path, default=results_path("personalize.json"))
    args = parser.parse_args()
    os.sched_setaffinity(0, {args.cpu})
    recipients = devices(args.devices)
    load_before = os.getloadavg()
    options = None if args.ttl_s is None else SendOptions(ttl_s=args.ttl_s)
    results = report(measure(recipients, args.runs, options))
    load_after = os.getloadavg()
    print(format_table(
        ["row", "CPU µs / recipient", "range", "x baseline"],
        [(r["row"], f"{r['median_us']:.2f}", f"{r['min_us']:.2f}-{r['max_us']:.2f}",
          f"{r['ratio']:.1f}") for r in results]))
    print(f"\n{args.devices:,} recipients, {args.runs} runs per row, pinned to CPU {args.cpu}; "
          f"load average (1, 5, 15 min) before {_load(load_before)}, after {_load(load_after)}, "
          f"on {os.cpu_count()} CPUs; TTL {args.ttl_s} s")
    write_json(args.output, {
        "bench": "personalize", "at": datetime.now(UTC).isoformat(), "commit": source_version(),
        "machine": machine(["jinja2", "orjson"]), "recipients": args.devices, "runs": args.runs,
        "ttl_s": args.ttl_s,
        "load_average": {"before": load_before, "after": load_after}, "rows": results})


def _load(load: tuple[float, float, float]) -> str:
    return "/".join(f"{value:.2f}" for value in load)


if __name__ == "__main__":
    main()
