"""Process settings from ``HERALD_*`` variables (herald/settings.py).

Every test starts from an environment without any HERALD_ variable, so the developer's shell or CI
cannot leak into the results; monkeypatch restores everything afterwards.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from pydantic import ValidationError

from herald.settings import GOOGLE_FCM_ENDPOINT, Settings, load_settings

EMULATOR = "http://127.0.0.1:8099"


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.upper().startswith("HERALD_"):
            monkeypatch.delenv(name)


@pytest.fixture
def emulator(monkeypatch: pytest.MonkeyPatch) -> None:
    """Point FCM at an emulator, so the other defaults are valid on their own."""
    monkeypatch.setenv("HERALD_FCM_ENDPOINT", EMULATOR)


@pytest.fixture
def credentials_file(tmp_path: Path) -> Path:
    path = tmp_path / "service-account.json"
    path.write_text("{}")
    return path


@pytest.mark.usefixtures("emulator")
def test_defaults() -> None:
    settings = Settings()
    assert settings.mongodb_url == "mongodb://127.0.0.1:27017/herald"
    assert settings.rabbitmq_url == "amqp://guest:guest@127.0.0.1:5672/"
    assert settings.redis_url == "redis://127.0.0.1:6379/0"
    assert settings.fcm_endpoint == EMULATOR
    assert settings.fcm_project_id == "herald-dev"
    assert settings.fcm_credentials is None
    assert settings.api_port == 8000
    assert settings.metrics_port is None
    assert settings.log_level == "INFO"
    assert settings.mongodb_database == "herald"
    assert settings.fcm_max_retries == 5
    assert settings.grace_period_s == 20.0


@pytest.mark.usefixtures("emulator")
def test_values_come_from_herald_prefixed_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HERALD_API_PORT", "9001")
    monkeypatch.setenv("HERALD_SENDER_CONCURRENCY", "8")
    monkeypatch.setenv("HERALD_LOG_LEVEL", "debug")
    monkeypatch.setenv("API_PORT", "1")  # without the prefix: not Herald's
    settings = Settings()
    assert settings.api_port == 9001
    assert settings.sender_concurrency == 8
    assert settings.log_level == "DEBUG"


@pytest.mark.usefixtures("emulator")
def test_settings_are_immutable() -> None:
    settings = Settings()
    with pytest.raises(ValidationError):
        settings.api_port = 1  # type: ignore[misc]


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("HERALD_MONGODB_URL", "postgres://127.0.0.1/herald"),
        ("HERALD_MONGODB_URL", "127.0.0.1:27017"),
        ("HERALD_MONGODB_URL", "mongodb:///herald"),
        ("HERALD_RABBITMQ_URL", "http://127.0.0.1:5672/"),
        ("HERALD_RABBITMQ_URL", "amqp://"),
        ("HERALD_REDIS_URL", "127.0.0.1:6379"),
        ("HERALD_REDIS_URL", "memcached://127.0.0.1"),
        ("HERALD_FCM_ENDPOINT", "fcm.googleapis.com"),
        ("HERALD_FCM_ENDPOINT", "ftp://127.0.0.1"),
    ],
)
@pytest.mark.usefixtures("emulator")
def test_bad_urls_are_rejected_naming_the_variable(monkeypatch: pytest.MonkeyPatch, variable: str,
                                                   value: str) -> None:
    monkeypatch.setenv(variable, value)
    with pytest.raises(ValidationError) as caught:
        Settings()
    assert variable in str(caught.value)
    assert value in str(caught.value)


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("HERALD_MONGODB_URL", "mongodb://db.internal:27017/herald"),
        ("HERALD_MONGODB_URL", "mongodb+srv://user:pw@cluster0.example.net/herald?retryWrites=true"),
        ("HERALD_MONGODB_URL", "mongodb://a:27017,b:27017,c:27017/herald?replicaSet=rs0"),
        ("HERALD_RABBITMQ_URL", "amqps://user:pw@mq.internal:5671/vhost"),
        ("HERALD_REDIS_URL", "rediss://:pw@cache.internal:6380/1"),
        ("HERALD_REDIS_URL", "unix:///var/run/redis/redis.sock?db=0"),
        ("HERALD_FCM_ENDPOINT", "https://fcm-proxy.internal"),
    ],
)
@pytest.mark.usefixtures("emulator")
def test_good_urls_are_accepted(monkeypatch: pytest.MonkeyPatch, variable: str, value: str) -> None:
    monkeypatch.setenv(variable, value)
    settings = Settings()
    assert getattr(settings, variable.removeprefix("HERALD_").lower()) == value


@pytest.mark.usefixtures("emulator")
def test_fcm_endpoint_loses_its_trailing_slash(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HERALD_FCM_ENDPOINT", EMULATOR + "/")
    assert Settings().fcm_endpoint == EMULATOR


@pytest.mark.parametrize("endpoint", [None, GOOGLE_FCM_ENDPOINT, GOOGLE_FCM_ENDPOINT + "/"])
def test_google_endpoint_without_credentials_is_rejected(monkeypatch: pytest.MonkeyPatch,
                                                         endpoint: str | None) -> None:
    if endpoint is not None:
        monkeypatch.setenv("HERALD_FCM_ENDPOINT", endpoint)
    with pytest.raises(ValidationError, match="HERALD_FCM_CREDENTIALS"):
        Settings()


def test_google_endpoint_with_credentials_is_accepted(monkeypatch: pytest.MonkeyPatch,
                                                      credentials_file: Path) -> None:
    monkeypatch.setenv("HERALD_FCM_CREDENTIALS", str(credentials_file))
    settings = Settings()
    assert settings.fcm_endpoint == GOOGLE_FCM_ENDPOINT
    assert settings.fcm_credentials == credentials_file


@pytest.mark.parametrize("endpoint", [None, EMULATOR])
def test_credentials_file_must_exist(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                     endpoint: str | None) -> None:
    if endpoint is not None:
        monkeypatch.setenv("HERALD_FCM_ENDPOINT", endpoint)
    missing = tmp_path / "nope.json"
    monkeypatch.setenv("HERALD_FCM_CREDENTIALS", str(missing))
    with pytest.raises(ValidationError, match="no such file") as caught:
        Settings()
    assert str(missing) in str(caught.value)


def test_credentials_must_be_a_file_not_a_directory(monkeypatch: pytest.MonkeyPatch,
                                                     tmp_path: Path) -> None:
    monkeypatch.setenv("HERALD_FCM_CREDENTIALS", str(tmp_path))
    with pytest.raises(ValidationError, match="HERALD_FCM_CREDENTIALS"):
        Settings()


@pytest.mark.parametrize(
    ("url", "database"),
    [
        ("mongodb://127.0.0.1:27017/campaigns", "campaigns"),
        ("mongodb://127.0.0.1:27017/campaigns?directConnection=true", "campaigns"),
        ("mongodb://127.0.0.1:27017/?directConnection=true", "herald"),
        ("mongodb://127.0.0.1:27017/", "herald"),
        ("mongodb://127.0.0.1:27017", "herald"),
        ("mongodb://127.0.0.1:27017?directConnection=true", "herald"),
        ("mongodb://u:p@a:1,b:2/prod_herald?replicaSet=rs0&authSource=admin", "prod_herald"),
        ("mongodb+srv://cluster0.example.net/herald_test_1", "herald_test_1"),
        ("mongodb://127.0.0.1:27017/my%2Ddb", "my-db"),
    ],
)
@pytest.mark.usefixtures("emulator")
def test_mongodb_database_comes_from_the_url_path(monkeypatch: pytest.MonkeyPatch, url: str,
                                                  database: str) -> None:
    monkeypatch.setenv("HERALD_MONGODB_URL", url)
    assert Settings().mongodb_database == database


@pytest.mark.parametrize(("interval", "misses", "ttl"), [("2", "3", 6.0), ("0.5", "4", 2.0)])
@pytest.mark.usefixtures("emulator")
def test_heartbeat_ttl_is_interval_times_misses(monkeypatch: pytest.MonkeyPatch, interval: str,
                                                misses: str, ttl: float) -> None:
    monkeypatch.setenv("HERALD_HEARTBEAT_INTERVAL_S", interval)
    monkeypatch.setenv("HERALD_HEARTBEAT_MISSES", misses)
    assert Settings().heartbeat_ttl_s == ttl


@pytest.mark.usefixtures("emulator")
def test_default_heartbeat_ttl() -> None:
    assert Settings().heartbeat_ttl_s == 6.0


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("HERALD_SENDER_CONCURRENCY", "0"),
        ("HERALD_FCM_TIMEOUT_S", "-1"),
        ("HERALD_LEASE_S", "0"),
        ("HERALD_API_PORT", "70000"),
        ("HERALD_FCM_MAX_RETRIES", "-1"),
        ("HERALD_LOG_LEVEL", "verbose"),
        ("HERALD_FCM_PROJECT_ID", ""),
        ("HERALD_CHUNK_MAX_ATTEMPTS", "many"),
    ],
)
@pytest.mark.usefixtures("emulator")
def test_out_of_range_numbers_and_levels_are_rejected(monkeypatch: pytest.MonkeyPatch, variable: str,
                                                      value: str) -> None:
    monkeypatch.setenv(variable, value)
    with pytest.raises(ValidationError):
        Settings()


# --- load_settings ---------------------------------------------------------------------------------
@pytest.mark.usefixtures("emulator")
def test_load_settings_returns_settings_on_a_good_environment() -> None:
    assert load_settings().fcm_endpoint == EMULATOR


@pytest.mark.usefixtures("emulator")
def test_load_settings_exits_naming_the_bad_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HERALD_REDIS_URL", "localhost:6379")
    monkeypatch.setenv("HERALD_SENDER_CONCURRENCY", "0")
    with pytest.raises(SystemExit) as caught:
        load_settings()
    message = caught.value.code
    assert isinstance(message, str)
    assert message.startswith("herald: invalid configuration")
    assert "HERALD_REDIS_URL" in message
    assert "HERALD_SENDER_CONCURRENCY" in message
    assert "Value error" not in message
    assert "pydantic" not in message  # readable, no library help links


def test_load_settings_exits_on_missing_credentials() -> None:
    with pytest.raises(SystemExit) as caught:
        load_settings()
    message = caught.value.code
    assert isinstance(message, str)
    assert "HERALD_FCM_CREDENTIALS" in message
    assert "HERALD_FCM_ENDPOINT" in message
