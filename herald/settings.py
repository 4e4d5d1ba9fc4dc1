"""Process settings, read once from ``HERALD_*`` environment variables and then never mutated.

Every service reads the same names. A bad value stops the process at start with a message naming the
variable, instead of failing later on first use.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import unquote, urlsplit

from pydantic import Field, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

GOOGLE_FCM_ENDPOINT = "https://fcm.googleapis.com"
DEFAULT_MONGODB_DATABASE = "herald"

PositiveFloat = Annotated[float, Field(gt=0)]
PositiveInt = Annotated[int, Field(gt=0)]


def _require_scheme(url: str, schemes: tuple[str, ...], name: str) -> str:
    parts = urlsplit(url)
    located = parts.hostname or (parts.scheme == "unix" and parts.path)
    if parts.scheme not in schemes or not located:
        wanted = " or ".join(f"{s}://host..." for s in schemes)
        raise ValueError(f"{name} must look like {wanted}, got {url!r}")
    return url


class Settings(BaseSettings):
    """Typed view of the environment shared by every Herald process."""

    model_config = SettingsConfigDict(env_prefix="HERALD_", frozen=True, extra="ignore")

    mongodb_url: str = f"mongodb://127.0.0.1:27017/{DEFAULT_MONGODB_DATABASE}"
    rabbitmq_url: str = "amqp://guest:guest@127.0.0.1:5672/"
    redis_url: str = "redis://127.0.0.1:6379/0"
    fcm_endpoint: str = GOOGLE_FCM_ENDPOINT
    fcm_project_id: str = Field(default="herald-dev", min_length=1)
    fcm_credentials: Path | None = None

    api_port: int = Field(default=8000, ge=0, le=65535)
    metrics_port: int | None = Field(default=None, ge=0, le=65535)
    log_level: str = "INFO"

    # Sender tuning.
    sender_prefetch: PositiveInt = 4
    sender_concurrency: PositiveInt = 256
    sender_batch_size: PositiveInt = 500
    sender_batches_in_flight: PositiveInt = 1
    fcm_timeout_s: PositiveFloat = 10.0
    fcm_max_retries: int = Field(default=5, ge=0)
    fcm_rate_per_min: PositiveInt = 600_000
    chunk_max_attempts: PositiveInt = 5
    chunk_budget_s: PositiveFloat = 300.0

    # Coordination.
    grace_period_s: PositiveFloat = 20.0
    lease_s: PositiveFloat = 15.0
    heartbeat_interval_s: PositiveFloat = 2.0
    heartbeat_misses: PositiveInt = 3
    cancel_flag_ttl_s: PositiveInt = 7 * 24 * 3600
    sweep_interval_s: PositiveFloat = 1.0

    # Scheduler.
    scheduler_poll_s: PositiveFloat = 0.5
    misfire_grace_s: PositiveFloat = 300.0

    @field_validator("mongodb_url")
    @classmethod
    def _mongodb_url(cls, value: str) -> str:
        return _require_scheme(value, ("mongodb", "mongodb+srv"), "HERALD_MONGODB_URL")

    @field_validator("rabbitmq_url")
    @classmethod
    def _rabbitmq_url(cls, value: str) -> str:
        return _require_scheme(value, ("amqp", "amqps"), "HERALD_RABBITMQ_URL")

    @field_validator("redis_url")
    @classmethod
    def _redis_url(cls, value: str) -> str:
        return _require_scheme(value, ("redis", "rediss", "unix"), "HERALD_REDIS_URL")

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
