"""Prometheus metrics and logging, the same in every service.

Metric objects live in the process-wide default registry, as prometheus-client intends; each
service exposes it on ``/metrics``. Names follow Prometheus conventions (base units, ``_total``).
"""

from __future__ import annotations

import logging
import sys

from prometheus_client import Counter, Gauge, Histogram

from herald.domain.fcm_errors import CONFIGURATION_ERRORS, FcmError
from herald.domain.suppression import Rule

STOPPING_CODES = {*CONFIGURATION_ERRORS, FcmError.UNAUTHENTICATED, FcmError.SENDER_ID_MISMATCH}
"""Codes with which a sender stops a campaign (``herald/service_layer/sending/refusals.py``)."""

LATENCY_BUCKETS_S = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)

# --- sending ---------------------------------------------------------------------------------------
MESSAGES = Counter("herald_messages_total",
                   "Recipients recorded by senders, by outcome, error and the campaign's lane",
                   ["outcome", "error", "lane"])
SUPPRESSED = Counter("herald_recipients_suppressed_total",
                     "Recipients a rule of Herald's held back at send time, never sent "
                     "(frequency_cap: the person had as many marketing pushes as "
                     "HERALD_MARKETING_CAP allows; quiet_hours: their local time was inside "
                     "the quiet window of a campaign that skips)", ["rule"])
for _rule in Rule:  # a series from the start: the dashboard shows 0, not nothing
    SUPPRESSED.labels(_rule.value)
FIRST_REQUEST_SECONDS = Histogram(
    "herald_first_request_seconds",
    "From when a campaign was due (or approved) to its first FCM request, by lane",
    ["lane"], buckets=(0.1, 0.25, 0.5, 1.0, 2.0, 3.0, 5.0, 10.0, 30.0, 60.0, 300.0))
FCM_REQUEST_SECONDS = Histogram("herald_fcm_request_seconds", "Duration of one FCM request",
                                buckets=LATENCY_BUCKETS_S)
FCM_RETRIES = Counter("herald_fcm_retries_total", "FCM requests retried after push-back",
                      ["error"])
FCM_ERRORS = Counter(
    "herald_fcm_errors_total",
    "FCM answers other than success, by the code Herald records (herald/domain/fcm_errors.py); "
    "TIMEOUT: no answer in time, the message may have been delivered", ["code"])
CHUNKS = Counter("herald_chunks_total", "Chunks finished by senders, by final status", ["status"])
DEVICE_PACE_DEFERRED = Counter(
    "herald_device_pace_deferred_total",
    "Messages held back a moment because their device had one from Herald less than a pace "
    "interval ago (HERALD_DEVICE_RATE_PER_MIN); each is sent once its device's pace allows")
CHUNKS_DEFERRED = Counter("herald_chunks_deferred_total",
                          "Chunk deliveries handed back: another live sender holds that chunk")
CHUNKS_DEAD_LETTERED = Counter("herald_chunks_dead_lettered_total",
                               "Chunks given up on after repeated failures")
CHUNKS_PUBLISHED = Counter("herald_chunks_published_total", "Chunks published by dispatchers")
DISPATCH_PAUSED_SECONDS = Counter("herald_dispatch_paused_seconds_total",
                                  "Time dispatchers waited for room in the chunk queue")
RATE_LIMIT_WAIT_SECONDS = Counter("herald_rate_limit_wait_seconds_total",
                                  "Time senders waited for the shared FCM rate limit")

# --- campaigns -------------------------------------------------------------------------------------
CAMPAIGNS_FINISHED = Counter("herald_campaigns_finished_total", "Campaigns reaching a final status",
                             ["status"])
CAMPAIGNS_STOPPED = Counter(
    "herald_campaigns_stopped_total",
    "Campaigns a sender stopped because FCM refused them as misconfigured (payload, permission, "
    "credentials, project), by the code Herald recorded; counted by the pod that stopped it", ["code"])
for _code in sorted(STOPPING_CODES):  # a series from the start: alerts see 0, not nothing
    CAMPAIGNS_STOPPED.labels(_code)

CAMPAIGNS_PAUSED = Counter(
    "herald_campaigns_paused_total",
    "Campaigns paused, by who decided: an operator or AMQP tool (manual) or the staged rollout's "
    "gate (gate); counted by the pod that decided", ["reason"])
for _reason in ("manual", "gate"):
    CAMPAIGNS_PAUSED.labels(_reason)
CAMPAIGNS_RESUMED = Counter("herald_campaigns_resumed_total", "Paused campaigns resumed")

# --- cancellation: how fast it takes effect, how much went out first, flags, strays ----------
CANCEL_LATENCY_SECONDS = Histogram(
    "herald_cancel_latency_seconds",
    "From the cancel request to the last pod's acknowledgement", buckets=LATENCY_BUCKETS_S)
CANCEL_SENT_RATIO = Histogram(
    "herald_cancel_sent_ratio", "Share of the targeted recipients sent before a cancel took effect",
    buckets=(0.05, 0.1, 0.25, 0.5, 0.75, 0.9, 1.0))
CANCEL_FLAGS = Gauge("herald_cancel_flags", "Cancel flags alive in Redis")
CANCEL_UNMATCHED = Counter(
    "herald_cancel_unmatched_total",
    "Cancel messages for a campaign that is unknown or already finished, counted by each pod "
    "that receives one (should stay 0)")

# --- the api's gate ------------------------------------------------------------------------------
DEVICES_IMPORTED = Counter(
    "herald_devices_imported_total",
    "Lines of device imports (POST /v1/devices/import) by what each did: inserted, updated, "
    "unchanged or invalid; counted as each batch is written, so a long import shows its progress",
    ["outcome"])
for _outcome in ("inserted", "updated", "unchanged", "invalid"):
    DEVICES_IMPORTED.labels(_outcome)

API_REFUSED = Counter("herald_api_refused_total",
                      "Calls the api refused before reaching a route, by reason "
                      "(unauthenticated, auth_throttled, rate_limited, too_many_streams)",
                      ["reason"])

# --- pods and scheduling ---------------------------------------------------------------------------
PODS_LIVE = Gauge("herald_pods_live", "Pods with a fresh heartbeat", ["service"])
SCHEDULE_LAG_SECONDS = Histogram("herald_schedule_lag_seconds",
                                 "Actual start minus due instant of scheduled campaigns",
                                 buckets=LATENCY_BUCKETS_S)
SCHEDULE_CLAIMS = Counter("herald_schedule_claims_total", "Due runs claimed by this scheduler")
SCHEDULE_CLAIMS_LOST = Counter("herald_schedule_claims_lost_total",
                               "Due runs another scheduler replica claimed first")
SCHEDULE_MISSED = Counter("herald_schedule_missed_total",
                          "Runs marked missed: overdue beyond the misfire grace")

# --- retention: finished campaigns' records archived, then deleted ----------------------------
ARCHIVED_CAMPAIGNS = Counter(
    "herald_archived_campaigns_total",
    "Finished campaigns whose per-recipient records were archived (HERALD_ARCHIVE_URL) and "
    "verified by reading the archive back")
RETENTION_DELETED = Counter(
    "herald_retention_deleted_total",
    "Per-recipient records deleted after their campaign's archive was verified, by collection",
    ["collection"])
for _collection in ("chunks", "deliveries"):
    RETENTION_DELETED.labels(_collection)
RETENTION_WAITING = Gauge(
    "herald_retention_waiting_campaigns",
    "Finished campaigns past HERALD_RETENTION_DAYS whose records are kept, as last seen by this "
    "api: no HERALD_ARCHIVE_URL, a follow-up still reading them, or their archive failed")
ARCHIVES_REWRITTEN = Counter(
    "herald_archives_rewritten_total",
    "Archives rewritten without people erased after they were written (their lines replaced "
    "by the erased placeholder), verified by reading them back")
ARCHIVE_FAILURES = Counter(
    "herald_archive_failures_total",
    "Archives not verified, their records kept: checksum (the target read back other bytes), "
    "count (the lines disagree with the campaign's counts)", ["reason"])
for _reason in ("checksum", "count"):
    ARCHIVE_FAILURES.labels(_reason)


MAX_LOG_LINE_CHARS = 2000
"""No line Herald writes to its log is longer, whatever it logs (a 1 MiB message body, a 1 MiB
exception text): the rest of the line is cut and the cut is said."""
MAX_LOG_RECORD_LINES = 200
"""Lines one log record may take (a traceback); beyond, its head and its tail are kept."""
_HEAD_LINES = 20


class BoundedFormatter(logging.Formatter):
    """The standard formatter, with every line of every record cut to ``MAX_LOG_LINE_CHARS``
    and every record to ``MAX_LOG_RECORD_LINES`` (head and tail kept: the tail of a traceback
    says what failed)."""

    def format(self, record: logging.LogRecord) -> str:
        lines = super().format(record).split("\n")
        if len(lines) > MAX_LOG_RECORD_LINES:
            tail = MAX_LOG_RECORD_LINES - _HEAD_LINES - 1
            cut = len(lines) - _HEAD_LINES - tail
            lines = [*lines[:_HEAD_LINES], f"[... {cut} lines cut ...]", *lines[-tail:]]
        return "\n".join(_bounded(line) for line in lines)


def _bounded(line: str) -> str:
    if len(line) <= MAX_LOG_LINE_CHARS:
        return line
    marker = f" [... cut: {len(line)} characters in all]"
    return line[:MAX_LOG_LINE_CHARS - len(marker)] + marker


def setup_logging(service: str, level: str) -> None:
    """One line per event on stderr, with the service name, for ``docker logs`` and journald;
    no line longer than ``MAX_LOG_LINE_CHARS`` (``BoundedFormatter``)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(BoundedFormatter(
        f"%(asctime)s {service} %(levelname)s %(name)s: %(message)s"))
    logging.basicConfig(level=level, handlers=[handler], force=True)
    for noisy in ("aiormq", "aio_pika", "pymongo", "httpx", "uvicorn.access", "herald.amqp"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
