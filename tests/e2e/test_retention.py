"""Issue 33, point 3, with separate processes: a finished campaign past the retention is
archived by an api replica to a real S3-compatible server (moto's, started here as an HTTP
server), read back, and its chunks and deliveries deleted; its audit then answers 410
``archived`` with where the file is and its SHA-256, the file holds the audit's lines, and the
campaign's counts have not moved.

The replica is the shared fleet's api started again with a retention of a few seconds
(``HERALD_RETENTION_DAYS`` takes fractions of a day), checking every half second: the fake
clock of a process is its settings. It archives every finished campaign of this worker's fleet
older than that, earlier modules' too (what retention is for); it is stopped after the test.
"""

from __future__ import annotations

import gzip
import hashlib
import uuid
from collections import Counter
from collections.abc import Iterator
from typing import Any

import boto3
import orjson
import pytest
from pymongo import MongoClient

from devstack.processes import free_port
from devstack.stack import Stack
from tests.e2e.fleet import Fleet
from tests.e2e.harness import Api, reachable_devices
from tests.support import s3_server, wait_for

RETENTION_DAYS = 3 / 86_400
"""Three seconds."""
AWS = {"AWS_ACCESS_KEY_ID": "herald-e2e", "AWS_SECRET_ACCESS_KEY": "herald-e2e-secret",
       "AWS_DEFAULT_REGION": "us-east-1"}


@pytest.fixture
def stack(shared_stack: Stack) -> Stack:
    return shared_stack


@pytest.fixture
def s3_endpoint() -> Iterator[str]:
    with s3_server() as url:
        yield url


@pytest.fixture
def bucket(s3_endpoint: str) -> tuple[Any, str]:
    client = boto3.client("s3", endpoint_url=s3_endpoint, aws_access_key_id=AWS["AWS_ACCESS_KEY_ID"],
                          aws_secret_access_key=AWS["AWS_SECRET_ACCESS_KEY"],
                          region_name=AWS["AWS_DEFAULT_REGION"])
    name = f"herald-e2e-{uuid.uuid4().hex[:12]}"
    client.create_bucket(Bucket=name)
    return client, name


@pytest.fixture
def archiving(stack: Stack, s3_endpoint: str, bucket: tuple[Any, str]) -> Iterator[Api]:
    """An api replica that archives to the bucket what finished three seconds ago."""
    port = free_port()
    stack.start_service("api", "api-retention", HERALD_API_PORT=str(port),
                        HERALD_ARCHIVE_URL=f"s3://{bucket[1]}/e2e",
                        HERALD_ARCHIVE_S3_ENDPOINT_URL=s3_endpoint,
                        HERALD_RETENTION_DAYS=repr(RETENTION_DAYS),
                        HERALD_RETENTION_INTERVAL_S="0.5", **AWS)
    client = Api(f"http://127.0.0.1:{port}", stack.config.api_key)
    yield client
    client.http.close()


def _records(stack: Stack, campaign_id: str) -> tuple[int, int]:
    with MongoClient(stack.config.mongodb_url) as client:
        db = client[stack.config.database]
        return (db.chunks.count_documents({"campaign_id": campaign_id}),
                db.deliveries.count_documents({"campaign_id": campaign_id}))


def test_a_finished_campaign_is_archived_deleted_and_its_audit_says_where(
        stack: Stack, fleet: Fleet, api: Api, bucket: tuple[Any, str],
        request: pytest.FixtureRequest) -> None:
    _, audience = fleet.import_own(api, reachable_devices(60))
    campaign_id = api.create_campaign(audience=audience, chunk_size=7)
    finished = api.wait_finished(campaign_id, timeout_s=30)
    sent = sorted(api.audit_tokens(campaign_id, "sent"))
    assert len(sent) == finished["counts"]["sent"] == 60
    assert _records(stack, campaign_id)[0] == 9

    replica: Api = request.getfixturevalue("archiving")  # started once the audit was read
    archived = wait_for(lambda: _purged(replica.campaign(campaign_id)), 60,
                        "the campaign to be archived and its records deleted")

    assert _records(stack, campaign_id) == (0, 0)
    assert archived["counts"] == finished["counts"] == api.campaign(campaign_id)["counts"]
    assert archived["variants"] == {"default": {"sent": 60, "failed": 0, "unsent": 0,
                                                "suppressed": 0}}
    record = archived["archive"]
    key = f"e2e/campaign-{campaign_id}.ndjson.gz"
    assert record["location"] == f"s3://{bucket[1]}/{key}"
    answer = api.http.get(f"/v1/campaigns/{campaign_id}/recipients", params={"outcome": "sent"})
    assert answer.status_code == 410, answer.text
    error = answer.json()["error"]
    assert error["code"] == "archived" and record["location"] in error["message"]
    assert record["sha256"] in error["message"]  # what the CLI prints
    [detail] = error["details"]
    assert {k: detail[k] for k in ("location", "sha256", "lines", "bytes")} == {
        "location": record["location"], "sha256": record["sha256"], "lines": 60,
        "bytes": record["bytes"]}
    data = bucket[0].get_object(Bucket=bucket[1], Key=key)["Body"].read()
    assert hashlib.sha256(data).hexdigest() == record["sha256"] and len(data) == record["bytes"]
    lines = [orjson.loads(line) for line in gzip.decompress(data).splitlines()]
    assert sorted(line["token"] for line in lines) == sent
    assert Counter(line["outcome"] for line in lines) == {"sent": 60}
    retarget = api.http.post(f"/v1/campaigns/{campaign_id}/retarget", json={})
    assert retarget.status_code == 410 and retarget.json()["error"]["code"] == "archived"


def _purged(campaign: dict[str, Any]) -> dict[str, Any] | None:
    archive = campaign["archive"]
    return campaign if archive is not None and archive["purged_at"] is not None else None
