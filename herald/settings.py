"""Process settings, read once from ``HERALD_*`` environment variables and then never mutated.

Every service reads the same names. A bad value stops the process at start with a message naming the
variable, instead of failing later on first use.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import parse_qsl, unquote, urlsplit, urlunsplit

from pydantic import Field, SecretStr, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

GOOGLE_FCM_ENDPOINT = "https://fcm.googleapis.com"
DEFAULT_MONGODB_DATABASE = "herald"

MIN_SECRET_CHARS = 24
MIN_SECRET_DISTINCT_CHARS = 8
PLACEHOLDER_SECRETS = ("CHANGE-ME-to-a-long-random-secret",)
"""The placeholders shipped in examples (deploy/kubernetes/base/secrets/*.example), refused by
name, as is anything that still says change-me."""
PositiveFloat = Annotated[float, Field(gt=0)]
PositiveInt = Annotated[int, Field(gt=0)]


def redacted(url: str) -> str:
    """``url`` as it may be shown in an error or a log line: its password replaced by ``***``."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    return urlunsplit(parts._replace(netloc=parts.netloc.replace(
        f":{parts.password}@", ":***@", 1)))


def _require_scheme(url: str, schemes: tuple[str, ...], name: str) -> str:
    parts = urlsplit(url)
    located = parts.hostname or (parts.scheme == "unix" and parts.path)
    if parts.scheme not in schemes or not located:
        wanted = " or ".join(f"{s}://host..." for s in schemes)
        raise ValueError(f"{name} must look like {wanted}, got {redacted(url)!r}")
    return url


def _require_strong_secret(secret: str, name: str) -> None:
    """One strength rule for a secret from any source; the message never shows the secret."""
    if secret in PLACEHOLDER_SECRETS or "change-me" in secret.lower().replace("_", "-") \
            or "changeme" in secret.lower():
        raise ValueError(f"{name} is the placeholder of an example; make a secret "
                         "(e.g. openssl rand -hex 32)")
    if len(secret) < MIN_SECRET_CHARS or len(set(secret)) < MIN_SECRET_DISTINCT_CHARS:
        raise ValueError(f"{name} must be at least {MIN_SECRET_CHARS} characters, "
                         f"{MIN_SECRET_DISTINCT_CHARS} of them different (e.g. openssl rand "
                         "-hex 32)")


# TLS: every driver reads its CA and client certificate from its URL's query, so no other setting
# is needed; what is checked at start is that the files exist and that the URL is a TLS one.
MONGODB_TLS_FILES = ("tlscafile", "tlscertificatekeyfile", "tlscrlfile")  # case-insensitive
RABBITMQ_TLS_FILES = ("cafile", "certfile", "keyfile")  # aiormq's amqps:// options
RABBITMQ_TLS_DIRS = ("capath",)
REDIS_TLS_FILES = ("ssl_ca_certs", "ssl_certfile", "ssl_keyfile")  # redis-py's rediss:// options
REDIS_TLS_DIRS = ("ssl_ca_path",)
REDIS_CERT_REQS = ("none", "optional", "required")


INSECURE_TLS_OPTIONS: dict[str, dict[str, tuple[str, ...]]] = {
    # variable -> option (lower case) -> values that switch a check off (empty: any value does)
    "HERALD_MONGODB_URL": {"tlsinsecure": ("true",), "tlsallowinvalidcertificates": ("true",),
                           "tlsallowinvalidhostnames": ("true",)},
    "HERALD_RABBITMQ_URL": {"no_verify_ssl": ()},  # aiormq: anything but 0
    "HERALD_REDIS_URL": {"ssl_cert_reqs": ("none", "optional"),
                         "ssl_check_hostname": ("false", "0", "no")},
}


def _query(url: str, *, lower: bool = False) -> dict[str, str]:
    pairs = parse_qsl(urlsplit(url).query, keep_blank_values=True)
    return {(key.lower() if lower else key): value for key, value in pairs}


def _require_tls_paths(options: Mapping[str, str], name: str, files: tuple[str, ...],
                       directories: tuple[str, ...] = ()) -> None:
    """Each TLS file (or directory) the URL names must exist, or the process stops now."""
    for key, value in options.items():
        if key in files and not Path(value).is_file():
            raise ValueError(f"{name}: {key}={value}: no such file")
        if key in directories and not Path(value).is_dir():
            raise ValueError(f"{name}: {key}={value}: no such directory")


def _require_tls_scheme(url: str, options: Mapping[str, str], tls_options: tuple[str, ...],
                        tls_scheme: str, name: str) -> None:
    """TLS options on a plain URL would be ignored (or fail on first use): refuse them."""
    given = sorted(key for key in options if key in tls_options)
    if given and urlsplit(url).scheme != tls_scheme:
        raise ValueError(f"{name}: {', '.join(given)}: TLS options, for {tls_scheme}:// URLs only")


class Settings(BaseSettings):
    """Typed view of the environment shared by every Herald process."""

    model_config = SettingsConfigDict(env_prefix="HERALD_", frozen=True, extra="ignore")

    mongodb_url: str = f"mongodb://127.0.0.1:27017/{DEFAULT_MONGODB_DATABASE}"
    rabbitmq_url: str = "amqp://guest:guest@127.0.0.1:5672/"
    redis_url: str = "redis://127.0.0.1:6379/0"
    fcm_endpoint: str = GOOGLE_FCM_ENDPOINT
    fcm_project_id: str = Field(default="herald-dev", min_length=1)
    fcm_credentials: Path | None = None

    bind_host: str = Field(default="127.0.0.1", min_length=1)
    """Where the api and the workers' metrics listen: loopback unless a container says 0.0.0.0."""
    api_port: int = Field(default=8000, ge=0, le=65535)
    bootstrap_api_key: SecretStr | None = None
    """The secret of the ``admin`` key named ``bootstrap`` (or ``bootstrap_api_key_file``)."""
    bootstrap_api_key_file: Path | None = None
    api_max_body_bytes: PositiveInt = 16 * 1024 * 1024
    """The largest body of a device import (``POST /v1/devices/bulk``: 10,000 devices); every
    other route takes at most what the largest campaign can need
    (``herald.contracts.sizes``), or this if it is smaller."""
    api_max_import_bytes: PositiveInt = 1024 * 1024 * 1024
    """The largest body of a streamed device import (``POST /v1/devices/import``, NDJSON, read
    as it arrives: the api never holds it whole); 1 GiB is about four million devices."""
    api_rate_per_s: PositiveFloat = 50.0
    """Each key's budget of changing calls (refused ones included), shared by api replicas."""
    api_burst: PositiveInt = 200
    api_read_rate_per_s: PositiveFloat = 50.0
    """Each key's budget of reads (event streams opened included)."""
    api_read_burst: PositiveInt = 500
    api_cancel_rate_per_s: PositiveFloat = 10.0
    """Each key's budget of cancels: its own, so that nothing else a key does starves a cancel
    (and large enough for a team pressing Stop at once with one key: 32 at once are tested)."""
    api_cancel_burst: PositiveInt = 100
    api_auth_failures_per_min: PositiveFloat = 30.0
    """Failed authentications allowed per client address (then 429 until the budget refills)."""
    api_auth_failure_burst: PositiveInt = 20
    api_streams_per_key: PositiveInt = 5
    """Event streams one key may hold open at once (every api replica together)."""
    api_forwarded_allow_ips: str = ""
    """Proxies whose X-Forwarded-For/-Proto the api believes (uvicorn's forwarded_allow_ips,
    comma-separated addresses or networks); empty: none, the peer address is the client."""
    metrics_port: int | None = Field(default=None, ge=0, le=65535)
    log_level: str = "INFO"

    # Sender tuning.
    sender_prefetch: PositiveInt = 4
    sender_concurrency: PositiveInt = 256
    sender_batch_size: PositiveInt = 500
    fcm_timeout_s: PositiveFloat = 10.0
    fcm_max_retries: int = Field(default=5, ge=0)
    fcm_rate_per_min: PositiveInt = 600_000
    fcm_rate_per_s: PositiveFloat | None = None
    """The project's FCM rate per second; when set it replaces ``fcm_rate_per_min``."""
    device_rate_per_min: float = Field(default=120.0, ge=0, le=240)
    """The most messages one device gets from Herald in a minute, every campaign and sender
    together (``herald/domain/pace.py``): below FCM's own ~240; fractions allowed (6 is one
    every 10 s); 0: no pace. Read by the senders; every sender of a stack must have the same."""
    urgent_reserve_share: float = Field(default=0.2, ge=0, lt=1)
    """The share of the project's FCM rate never given to the ``bulk`` lane."""
    urgent_roles: str = "operator,admin"
    """Roles whose keys may send in the ``urgent`` lane (comma-separated)."""
    transactional_roles: str = "operator,admin"
    """Roles whose keys may send ``transactional`` campaigns (comma-separated): they reach
    devices that opted out of marketing."""
    marketing_cap: str | None = None
    """How many marketing campaigns one person may receive within rolling windows
    (``3/24h``, ``1/1h,3/24h,10/7d``); unset or empty: no cap. Read by the senders, which
    refuse to start with one they cannot read (``herald/domain/frequency_cap.py``); every
    sender of a stack must have the same."""
    frequency_cap_roles: str = "operator,admin"
    """Roles whose keys may give a campaign its own frequency cap, or none (comma-separated)."""
    quiet_hours: str | None = None
    """A window of wall-clock times (``21:00-08:00``) in which marketing recipients are held
    until it ends in their own timezone; unset, empty or ``off``: none. Read by the api (the
    estimate, the checks of a create) and the dispatchers (which plan the waves), which refuse
    to start with one they cannot read (``herald/domain/quiet_hours.py``)."""
    quiet_hours_roles: str = "operator,admin"
    """Roles whose keys may give a campaign quiet hours of its own, or none (comma-separated)."""
    forecast_sender_rate_per_s: PositiveFloat = 1_000.0
    """What one sender is assumed to send in a second for the forecasts (``finishes_in_s``,
    ``eta``) until the api has measured the fleet busy (``adapters/fleet_rate.py``)."""
    sender_paced_prefetch: PositiveInt = 256
    """Chunks of capped campaigns a sender holds at once (each waits for its campaign's rate)."""
    chunk_max_attempts: PositiveInt = 5
    chunk_budget_s: PositiveFloat = 300.0

    # Dispatcher tuning.
    dispatcher_prefetch: PositiveInt = 10
    dispatch_max_queued_chunks: PositiveInt = 64
    dispatch_campaign_window: PositiveInt = 12
    """Chunks of one uncapped campaign on offer at once (published, not closed): enough to keep
    the senders busy alone, few enough that no other campaign waits behind many of them."""
    dispatch_max_campaigns: PositiveInt = 256
    """Campaigns one dispatcher pages at once (urgent ones are always taken on top)."""

    # Coordination.
    start_timeout_s: PositiveFloat = 60.0
    grace_period_s: PositiveFloat = 20.0
    lease_s: PositiveFloat = 15.0
    heartbeat_interval_s: PositiveFloat = 2.0
    heartbeat_misses: PositiveInt = 3
    cancel_flag_ttl_s: PositiveInt = 7 * 24 * 3600
    sweep_interval_s: PositiveFloat = 1.0

    # Approval of large sends.
    approval_min_audience: PositiveInt | None = None
    """A campaign, schedule run or follow-up reaching at least this many devices waits
    ``awaiting_approval`` for a second key; unset: nothing waits."""

    # Test sends (issue 31: they stay tests).
    test_send_max_devices: PositiveInt = 25
    """Distinct devices a campaign's test sends may reach, all of them together."""
    test_send_per_device_per_hour: PositiveInt = 5
    """Test sends one device may get in an hour, whatever the campaign."""

    # What is kept, and for how long.
    idempotency_ttl_s: PositiveFloat = 24 * 3600.0
    """How long an ``Idempotency-Key`` binds a retry to the first answer."""
    retention_days: PositiveFloat = 90.0
    """How long per-recipient records are kept after their campaign finished (chunks and
    deliveries, archived first) or were written (test sends' records)."""
    retention_interval_s: PositiveFloat = 300.0
    """How often the api looks for finished campaigns past the retention."""
    archive_url: str | None = None
    """Where finished campaigns' records are archived before they are deleted: ``file:///dir``
    or ``s3://bucket/prefix``; unset: nothing is archived, so nothing is deleted."""
    archive_s3_endpoint_url: str | None = None
    """An S3-compatible server's URL (MinIO, Ceph...); unset: AWS's S3, as boto3 finds it."""

    # Scheduler.
    scheduler_poll_s: PositiveFloat = 0.5
    misfire_grace_s: PositiveFloat = 300.0

    @property
    def project_rate_per_s(self) -> float:
        """The project's FCM rate: ``HERALD_FCM_RATE_PER_S``, else ``HERALD_FCM_RATE_PER_MIN``/60."""
        return self.fcm_rate_per_s if self.fcm_rate_per_s is not None else self.fcm_rate_per_min / 60

    @property
    def urgent_role_names(self) -> frozenset[str]:
        return _role_names(self.urgent_roles)

    @property
    def transactional_role_names(self) -> frozenset[str]:
        return _role_names(self.transactional_roles)

    @property
    def frequency_cap_role_names(self) -> frozenset[str]:
        return _role_names(self.frequency_cap_roles)

    @property
    def quiet_hours_role_names(self) -> frozenset[str]:
        return _role_names(self.quiet_hours_roles)

    @field_validator("urgent_roles", "transactional_roles", "frequency_cap_roles",
                     "quiet_hours_roles")
    @classmethod
    def _known_roles(cls, value: str) -> str:
        known = {"viewer", "responder", "operator", "ingest", "admin"}
        unknown = sorted({r.strip() for r in value.split(",") if r.strip()} - known)
        if unknown:
            raise ValueError(f"unknown roles {unknown}; roles are {sorted(known)}")
        return value

    @field_validator("archive_url")
    @classmethod
    def _archive_url(cls, value: str | None) -> str | None:
        """``file:///absolute/dir`` or ``s3://bucket[/prefix]`` (``domain/archive.py`` takes it
        apart; settings import nothing of Herald's)."""
        if value is None:
            return None
        parts = urlsplit(value)
        if parts.scheme == "file" and parts.netloc in ("", "localhost") and parts.path[:1] == "/":
            return value
        if parts.scheme == "s3" and parts.netloc:
            return value
        raise ValueError("HERALD_ARCHIVE_URL: file:///absolute/dir or s3://bucket/prefix")

    @field_validator("mongodb_url")
    @classmethod
    def _mongodb_url(cls, value: str) -> str:
        name = "HERALD_MONGODB_URL"
        _require_tls_paths(_query(value, lower=True), name, MONGODB_TLS_FILES)
        return _require_scheme(value, ("mongodb", "mongodb+srv"), name)

    @field_validator("rabbitmq_url")
    @classmethod
    def _rabbitmq_url(cls, value: str) -> str:
        name, options = "HERALD_RABBITMQ_URL", _query(value)
        _require_tls_scheme(value, options, RABBITMQ_TLS_FILES + RABBITMQ_TLS_DIRS, "amqps", name)
        _require_tls_paths(options, name, RABBITMQ_TLS_FILES, RABBITMQ_TLS_DIRS)
        return _require_scheme(value, ("amqp", "amqps"), name)

    @field_validator("redis_url")
    @classmethod
    def _redis_url(cls, value: str) -> str:
        name, options = "HERALD_REDIS_URL", _query(value)
        tls_options = (*REDIS_TLS_FILES, *REDIS_TLS_DIRS, "ssl_cert_reqs", "ssl_check_hostname")
        _require_tls_scheme(value, options, tls_options, "rediss", name)
        _require_tls_paths(options, name, REDIS_TLS_FILES, REDIS_TLS_DIRS)
        if options.get("ssl_cert_reqs", "required") not in REDIS_CERT_REQS:
            raise ValueError(f"{name}: ssl_cert_reqs must be one of {', '.join(REDIS_CERT_REQS)}")
        return _require_scheme(value, ("redis", "rediss", "unix"), name)

    @field_validator("fcm_endpoint")
    @classmethod
    def _fcm_endpoint(cls, value: str) -> str:
        return _require_scheme(value, ("http", "https"), "HERALD_FCM_ENDPOINT").rstrip("/")

    @field_validator("log_level")
    @classmethod
    def _log_level(cls, value: str) -> str:
        level = value.upper()
        if level not in {"DEBUG", "INFO", "WARNING", "ERROR"}:
            raise ValueError("HERALD_LOG_LEVEL must be DEBUG, INFO, WARNING or ERROR")
        return level

    @model_validator(mode="after")
    def _credentials_for_google(self) -> Settings:
        google = urlsplit(GOOGLE_FCM_ENDPOINT).hostname
        if urlsplit(self.fcm_endpoint).hostname == google and self.fcm_credentials is None:
            raise ValueError(
                "HERALD_FCM_CREDENTIALS (a service-account JSON file) is required when "
                "HERALD_FCM_ENDPOINT is Google's; point HERALD_FCM_ENDPOINT at an emulator otherwise"
            )
        if self.fcm_credentials is not None and not self.fcm_credentials.is_file():
            raise ValueError(f"HERALD_FCM_CREDENTIALS: no such file {self.fcm_credentials}")
        return self

    @model_validator(mode="after")
    def _bootstrap_key_from_file(self) -> Settings:
        if self.bootstrap_api_key_file is None:
            return self
        if self.bootstrap_api_key is not None:
            raise ValueError("set HERALD_BOOTSTRAP_API_KEY or HERALD_BOOTSTRAP_API_KEY_FILE, "
                             "not both")
        try:  # a mounted secret file often ends with a newline
            secret = self.bootstrap_api_key_file.read_text().strip()
        except OSError as exc:
            raise ValueError(f"HERALD_BOOTSTRAP_API_KEY_FILE: cannot read it ({exc})") from exc
        _require_strong_secret(secret, "the secret in HERALD_BOOTSTRAP_API_KEY_FILE")
        object.__setattr__(self, "bootstrap_api_key", SecretStr(secret))
        return self

    @field_validator("bootstrap_api_key")
    @classmethod
    def _bootstrap_key_strength(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None:
            _require_strong_secret(value.get_secret_value().strip(), "HERALD_BOOTSTRAP_API_KEY")
        return value

    def insecure_tls(self) -> list[str]:
        """The URL options that switch a TLS certificate or host name check off, as
        ``HERALD_X_URL: option=value``."""
        found = []
        urls = {"HERALD_MONGODB_URL": self.mongodb_url, "HERALD_RABBITMQ_URL": self.rabbitmq_url,
                "HERALD_REDIS_URL": self.redis_url}
        for variable, url in urls.items():
            for option, value in _query(url, lower=True).items():
                off = INSECURE_TLS_OPTIONS[variable].get(option)
                if off is not None and (value.lower() in off if off else value != "0"):
                    found.append(f"{variable}: {option}={value}")
        return found

    @property
    def mongodb_database(self) -> str:
        """Database named in the MongoDB URL's path, ``herald`` when the URL names none."""
        name = unquote(urlsplit(self.mongodb_url).path.lstrip("/"))
        return name or DEFAULT_MONGODB_DATABASE

    @property
    def heartbeat_ttl_s(self) -> float:
        """A pod whose heartbeat is older than this is dead."""
        return self.heartbeat_interval_s * self.heartbeat_misses


def _describe(error: Mapping[str, Any]) -> str:
    location = "_".join(str(part) for part in error["loc"]).upper()
    message = str(error["msg"]).removeprefix("Value error, ")
    return f"  HERALD_{location}: {message}" if location else f"  {message}"


def load_settings() -> Settings:
    """Read the environment, or exit with a readable message naming what is wrong."""
    try:
        return Settings()
    except ValidationError as exc:
        lines = [_describe(error) for error in exc.errors()]
        sys.exit("herald: invalid configuration\n" + "\n".join(lines))


def warn_about_insecure_tls(settings: Settings) -> None:
    """A WARNING at start for each URL option that switches a certificate check off."""
    for option in settings.insecure_tls():
        logging.getLogger("herald.settings").warning(
            "%s switches TLS certificate checks off: anyone on the path can pose as the server",
            option)


def _role_names(listed: str) -> frozenset[str]:
    """The roles of a comma-separated setting (``HERALD_URGENT_ROLES``)."""
    return frozenset(role.strip() for role in listed.split(",") if role.strip())
