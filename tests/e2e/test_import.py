"""Issue 33, point 5, with separate processes: the app backend's key imports a file of devices
with ``herald devices import`` through the running api (progress on stderr, counts on stdout),
the same file again changes nothing, and a campaign to them then reaches each device exactly
once (the emulator's record). A viewer's key is refused 403, and a body declared over the api's
import limit 413 with a JSON error, before a byte of it is read."""

from __future__ import annotations

import http.client
import os
import subprocess
import sys
import uuid
from collections import Counter
from pathlib import Path
from urllib.parse import urlsplit

import orjson
import pytest

from devstack.stack import REPO, Stack
from fcm_emulator.client import EmulatorClient
from herald.settings import Settings
from tests.e2e.harness import Api

DEVICES = 3_000


@pytest.fixture
def stack(shared_stack: Stack) -> Stack:
    return shared_stack


def _herald(stack: Stack, key: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "herald_cli", *args, "--api",
                           stack.config.api_url], capture_output=True, text=True, timeout=120,
                          cwd=REPO, env={**os.environ, "HERALD_API_KEY": key})


def _file(folder: Path, topic: str) -> tuple[Path, list[str]]:
    tokens = [f"imp{i:05d}-{topic}-" + "x" * 100 for i in range(DEVICES)]
    path = folder / "devices.ndjson"
    path.write_bytes(b"".join(orjson.dumps({
        "token": token, "user_id": f"user-{i}", "platform": "android", "topics": [topic],
        "marketing_enabled": True}) + b"\n" for i, token in enumerate(tokens)))
    return path, tokens


def test_the_cli_imports_a_file_and_a_campaign_reaches_each_device_once(
        stack: Stack, api: Api, emulator: EmulatorClient, tmp_path: Path) -> None:
    topic = f"imp{uuid.uuid4().hex[:12]}"
    path, tokens = _file(tmp_path, topic)
    ingest = api.mint_key("ingest", f"app-backend-{topic}")

    imported = _herald(stack, ingest, "devices", "import", str(path))
    assert imported.returncode == 0, imported.stderr
    assert imported.stdout.strip() == (f"{DEVICES:,} lines: {DEVICES:,} inserted, 0 updated, "
                                       "0 unchanged, 0 invalid")
    assert imported.stderr.splitlines()[-1].startswith(f"sent {DEVICES:,} lines (100%), ")
    again = _herald(stack, ingest, "devices", "import", str(path))
    assert again.returncode == 0, again.stderr
    assert again.stdout.strip() == (f"{DEVICES:,} lines: 0 inserted, 0 updated, "
                                    f"{DEVICES:,} unchanged, 0 invalid")

    campaign_id = api.create_campaign(audience={"topics": [topic]})
    campaign = api.wait_finished(campaign_id, timeout_s=60)
    assert campaign["status"] == "completed"
    assert campaign["counts"]["sent"] == DEVICES
    accepted = Counter(r.token for r in emulator.received() if r.error is None)
    assert {token: accepted[token] for token in tokens} == dict.fromkeys(tokens, 1)


def test_a_viewer_may_not_import(stack: Stack, api: Api, tmp_path: Path) -> None:
    secret = api.mint_key("viewer", "import-viewer")
    path, _ = _file(tmp_path, f"imp{uuid.uuid4().hex[:12]}")
    refused = _herald(stack, secret, "devices", "import", str(path))
    assert refused.returncode == 1
    assert "(forbidden, HTTP 403)" in refused.stderr
    viewer = api.as_key(secret)
    try:
        response = viewer.http.post("/v1/devices/import", content=b'{"token": "v", '
                                    b'"platform": "ios"}\n',
                                    headers={"Content-Type": "application/x-ndjson"})
    finally:
        viewer.http.close()
    assert response.status_code == 403
    assert response.json()["error"]["code"] == "forbidden"


def test_a_body_declared_over_the_import_limit_is_413_json_unread(stack: Stack) -> None:
    limit = Settings.model_fields["api_max_import_bytes"].default  # the fleet runs the default
    address = urlsplit(stack.config.api_url)
    connection = http.client.HTTPConnection(address.hostname or "127.0.0.1", address.port,
                                            timeout=10)
    try:
        connection.putrequest("POST", "/v1/devices/import")
        connection.putheader("Authorization", f"Bearer {stack.config.api_key}")
        connection.putheader("Content-Type", "application/x-ndjson")
        connection.putheader("Content-Length", str(limit + 1))
        connection.endheaders()
        connection.send(b'{"token": "never-read", "platform": "ios"}\n')
        response = connection.getresponse()
        status, media_type, body = (response.status, response.getheader("Content-Type"),
                                    orjson.loads(response.read()))
    finally:
        connection.close()
    assert (status, media_type) == (413, "application/json")
    assert body["error"]["code"] == "request_too_large"
    assert f"limited to {limit} bytes" in body["error"]["message"]
