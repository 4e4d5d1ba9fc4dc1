"""Finished campaigns' records archived, verified, then deleted (issue 33, retention), against
the MongoDB wire server and a real S3-compatible HTTP server started here (moto's server mode,
``ThreadedMotoServer``) or a directory; then what the in-process api answers about an archived
campaign. No mocks: a failed archive is a real one (a bucket that does not exist, a file
changed on disk after it was written)."""

from __future__ import annotations

import asyncio
import gzip
import hashlib
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import boto3
import httpx
import orjson
import pytest
from prometheus_client import REGISTRY

from herald import names
from herald.adapters.archival import ArchivalStore
from herald.adapters.archives import DirectoryArchive, S3Archive
from herald.adapters.mongo import Database
from herald.clock import utcnow
from herald.domain.archive import ArchiveUrl, VariantCounts, parse_archive_url
from herald.domain.documents import Campaign, FollowUp, FollowUpOf
from herald.domain.suppression import Rule, suppressed_code
from herald.service_layer.archive_erasure import ArchiveEraser
from herald.service_layer.archiving import ArchivePolicy, Archivist
from herald.service_layer.erasure import erase_user
from herald.service_layer.ports import ArchiveTarget, Stores
from herald.service_layer.recipients import final_counts
from tests.factories import at, begin_cancel, cancelled_paged_campaign, paged_campaign
from tests.factories import campaign as new_campaign
from tests.integration.helpers import mint
from tests.support import error_code, s3_server, unique_name

POLICY = ArchivePolicy(kept=timedelta(days=90), every_s=0.0)
LATER = timedelta(days=91)
"""The fake clock: a run this long after the campaign finished finds it due."""


@pytest.fixture(scope="module")
def s3_endpoint() -> Iterator[str]:
    """A real S3-compatible server over HTTP on a free port, for this module."""
    with s3_server() as url:
        yield url


@pytest.fixture
def s3(s3_endpoint: str, monkeypatch: pytest.MonkeyPatch) -> Any:
    """boto3's client of that server, with the usual AWS variables (what an api reads too)."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "herald-test")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "herald-test-secret")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    return boto3.client("s3", endpoint_url=s3_endpoint)


@pytest.fixture
def bucket(s3: Any) -> Iterator[str]:
    name = unique_name("herald-archive").replace("_", "-").lower()[:60]
    s3.create_bucket(Bucket=name)
    yield name
    for listed in s3.list_objects_v2(Bucket=name).get("Contents", []):
        s3.delete_object(Bucket=name, Key=listed["Key"])
    s3.delete_bucket(Bucket=name)


def s3_target(bucket: str, endpoint: str) -> S3Archive:
    return S3Archive(parse_archive_url(f"s3://{bucket}/herald/archive"), endpoint)


def archivist(db: Database, stores: Stores, target: ArchiveTarget | None,
              pod_id: str = "api-1") -> Archivist:
    return Archivist(stores, ArchivalStore(db), target, pod_id, POLICY)


async def records_of(db: Database, campaign_id: str) -> tuple[int, int]:
    return (await db[names.CHUNKS].count_documents({"campaign_id": campaign_id}),
            await db[names.DELIVERIES].count_documents({"campaign_id": campaign_id}))


def read_archive(data: bytes) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in gzip.decompress(data).splitlines()]


def check_lines(lines: list[dict[str, Any]]) -> None:
    """``cancelled_paged_campaign`` (12 sent, 1 failed, 17 unsent) with u3 erased."""
    assert Counter(line["outcome"] for line in lines) == {"sent": 12, "failed": 1, "unsent": 17}
    [erased] = [line for line in lines if line.get("erased")]
    assert erased == {"token": "", "erased": True, "outcome": "sent", "error": None}
    assert not any(line.get("user_id") == "u3" or line["token"] == "tok-00003" for line in lines)
    assert {"token": "tok-00011", "user_id": "u11", "outcome": "failed",
            "error": "UNREGISTERED", "variant": "default", "rule": None} in lines


async def finished_with_an_erased_person(stores: Stores) -> Campaign:
    campaign = await cancelled_paged_campaign(stores)
    await erase_user(stores.devices, stores.chunks, stores.test_sends, "u3")
    return campaign


async def test_archived_to_s3_read_back_checked_then_the_records_go(
        db: Database, stores: Stores, s3: Any, bucket: str, s3_endpoint: str) -> None:
    campaign = await finished_with_an_erased_person(stores)
    assert await records_of(db, campaign.id) == (3, 3)
    keeper = archivist(db, stores, s3_target(bucket, s3_endpoint))

    assert await keeper.run(utcnow() + timedelta(days=89)) == []  # not due yet
    assert await records_of(db, campaign.id) == (3, 3)
    [archived] = await keeper.run(utcnow() + LATER)

    record = archived.archive
    assert record is not None
    key = f"herald/archive/campaign-{campaign.id}.ndjson.gz"
    assert record.location == f"s3://{bucket}/{key}"
    data = s3.get_object(Bucket=bucket, Key=key)["Body"].read()
    assert hashlib.sha256(data).hexdigest() == record.sha256
    assert (record.lines, record.bytes) == (30, len(data))
    check_lines(read_archive(data))
    assert await records_of(db, campaign.id) == (0, 0)
    kept = await stores.campaigns.get(campaign.id)
    assert kept is not None and kept.archive is not None and kept.archive.purged_at is not None
    assert kept.counts == campaign.counts and kept.content == campaign.content
    assert kept.variants == {"default": VariantCounts(sent=11, failed=1, unsent=17),
                             "erased": VariantCounts(sent=1)}
    assert await keeper.run(utcnow() + LATER) == []  # archived once


async def test_archived_to_a_directory(db: Database, stores: Stores, tmp_path: Path) -> None:
    campaign = await finished_with_an_erased_person(stores)
    target = DirectoryArchive(parse_archive_url(f"file://{tmp_path}/archive"))
    [archived] = await archivist(db, stores, target).run(utcnow() + LATER)

    path = tmp_path / "archive" / f"campaign-{campaign.id}.ndjson.gz"
    assert archived.archive is not None and archived.archive.location == f"file://{path}"
    assert hashlib.sha256(path.read_bytes()).hexdigest() == archived.archive.sha256
    check_lines(read_archive(path.read_bytes()))
    assert [p.name for p in (tmp_path / "archive").iterdir()] == [path.name]  # no leftovers
    assert await records_of(db, campaign.id) == (0, 0)


async def test_suppressed_recipients_are_archived_with_their_rule(
        db: Database, stores: Stores, tmp_path: Path) -> None:
    """Every outcome is in the archive: its lines add up to ``targeted`` (12 sent, 1 failed,
    3 suppressed by the frequency cap, 14 unsent), or the archive is refused."""
    campaign_id = await paged_campaign(stores)
    await stores.deliveries.record(campaign_id, 2, "s1", at(
        (p, suppressed_code(Rule.FREQUENCY_CAP)) for p in range(3)), utcnow())
    await begin_cancel(stores, campaign_id)
    paged = await stores.campaigns.get(campaign_id)
    assert paged is not None
    counts = (await final_counts(stores, paged)).counts
    assert await stores.campaigns.confirm_cancel(campaign_id, counts, utcnow()) is not None
    target = DirectoryArchive(parse_archive_url(f"file://{tmp_path}/archive"))
    [archived] = await archivist(db, stores, target).run(utcnow() + LATER)

    lines = read_archive((tmp_path / "archive" / f"campaign-{campaign_id}.ndjson.gz").read_bytes())
    assert Counter(line["outcome"] for line in lines) == {
        "sent": 12, "failed": 1, "suppressed": 3, "unsent": 14}
    assert {line["rule"] for line in lines if line["outcome"] == "suppressed"} == {"frequency_cap"}
    assert archived.variants == {"default": VariantCounts(sent=12, failed=1, unsent=14,
                                                          suppressed=3)}
    assert await records_of(db, campaign_id) == (0, 0)


class ChangedOnDisk(DirectoryArchive):
    """A disk that keeps other bytes than it was given (the file is rewritten after the put)."""

    def __init__(self, url: ArchiveUrl, root: Path) -> None:
        super().__init__(url)
        self._path = root

    async def put(self, name: str, blocks: AsyncIterator[bytes]) -> None:
        await super().put(name, blocks)
        (self._path / name).write_bytes(b"not what was written")


async def test_nothing_is_deleted_before_the_archive_reads_back_as_written(
        db: Database, stores: Stores, tmp_path: Path, s3: Any, s3_endpoint: str) -> None:
    campaign = await cancelled_paged_campaign(stores)
    changed = ChangedOnDisk(parse_archive_url(f"file://{tmp_path}"), tmp_path)
    assert await archivist(db, stores, changed).run(utcnow() + LATER) == []
    missing_bucket = s3_target(unique_name("absent").replace("_", "-").lower()[:60], s3_endpoint)
    # refused, it stays claimed until the lease ends: nobody tries it before
    assert await archivist(db, stores, missing_bucket, "api-2").run(utcnow() + LATER) == []
    with pytest.raises(Exception, match="NoSuchBucket"):
        await archivist(db, stores, missing_bucket, "api-2").run(
            utcnow() + LATER + POLICY.lease + timedelta(seconds=1))

    assert await records_of(db, campaign.id) == (3, 3)
    kept = await stores.campaigns.get(campaign.id)
    assert kept is not None and kept.archive is None


async def test_a_refused_archive_holds_up_none_of_the_campaigns_after_it(
        db: Database, stores: Stores, tmp_path: Path) -> None:
    """The oldest campaign lost a chunk (its archive would hold fewer lines than it targeted):
    refused, and the next run archives the later ones rather than trying it again first."""
    broken, *fine = [await cancelled_paged_campaign(stores) for _ in range(3)]
    await db[names.CHUNKS].delete_one({"campaign_id": broken.id, "seq": 2})
    target = DirectoryArchive(parse_archive_url(f"file://{tmp_path}"))
    keeper = Archivist(stores, ArchivalStore(db), target, "api-1",
                       ArchivePolicy(kept=POLICY.kept, every_s=0.0, per_run=1))
    assert await keeper.run(utcnow() + LATER) == []  # the broken one, refused
    archived = [(await keeper.run(utcnow() + LATER))[0].id for _ in fine]
    assert archived == [c.id for c in fine]
    assert (await records_of(db, broken.id))[1] == 3  # its deliveries are kept


async def test_without_an_archive_target_nothing_is_deleted_and_the_wait_is_counted(
        db: Database, stores: Stores, tmp_path: Path) -> None:
    campaigns = [await cancelled_paged_campaign(stores) for _ in range(2)]
    assert await archivist(db, stores, None).run(utcnow() + LATER) == []
    for campaign in campaigns:
        assert await records_of(db, campaign.id) == (3, 3)
    assert REGISTRY.get_sample_value("herald_retention_waiting_campaigns") == 2

    target = DirectoryArchive(parse_archive_url(f"file://{tmp_path}"))
    assert len(await archivist(db, stores, target).run(utcnow() + LATER)) == 2
    assert REGISTRY.get_sample_value("herald_retention_waiting_campaigns") == 0


async def test_two_replicas_at_once_archive_a_campaign_once(
        db: Database, stores: Stores, s3: Any, bucket: str, s3_endpoint: str) -> None:
    campaigns = [await cancelled_paged_campaign(stores) for _ in range(3)]
    runs = await asyncio.gather(*(
        archivist(db, stores, s3_target(bucket, s3_endpoint), f"api-{i}").run(utcnow() + LATER)
        for i in range(2)))

    archived = [c.id for run in runs for c in run]
    assert sorted(archived) == sorted(c.id for c in campaigns)  # each once, by one of them
    listed = s3.list_objects_v2(Bucket=bucket)["Contents"]
    assert len(listed) == 3
    for campaign in campaigns:
        assert await records_of(db, campaign.id) == (0, 0)


async def test_a_claim_held_by_a_live_replica_is_left_alone_and_taken_after_its_lease(
        db: Database, stores: Stores, tmp_path: Path) -> None:
    campaign = await cancelled_paged_campaign(stores)
    archival, now = ArchivalStore(db), utcnow() + LATER
    assert await archival.claim(campaign.id, "api-dead", now, now + timedelta(minutes=15))
    target = DirectoryArchive(parse_archive_url(f"file://{tmp_path}"))
    assert await archivist(db, stores, target).run(now) == []
    assert await records_of(db, campaign.id) == (3, 3)
    [archived] = await archivist(db, stores, target).run(now + timedelta(minutes=16))
    assert archived.id == campaign.id


async def test_a_campaign_a_follow_up_still_pages_keeps_its_records(
        db: Database, stores: Stores, tmp_path: Path) -> None:
    original = await cancelled_paged_campaign(stores)
    follow_up = new_campaign(follow_up=FollowUp(campaign_id=original.id,
                                                outcome=FollowUpOf.UNSENT), audience=None)
    await stores.campaigns.insert(follow_up)
    target = DirectoryArchive(parse_archive_url(f"file://{tmp_path}"))
    assert await archivist(db, stores, target).run(utcnow() + LATER) == []
    assert await records_of(db, original.id) == (3, 3)


# --- the api ---------------------------------------------------------------------------------
async def test_the_api_says_archived_where_and_refuses_follow_ups(
        api: httpx.AsyncClient, db: Database, stores: Stores, tmp_path: Path) -> None:
    campaign = await cancelled_paged_campaign(stores)
    target = DirectoryArchive(parse_archive_url(f"file://{tmp_path}"))
    [archived] = await archivist(db, stores, target).run(utcnow() + LATER)
    assert archived.archive is not None

    audit = await api.get(f"/v1/campaigns/{campaign.id}/recipients", params={"outcome": "sent"})
    assert audit.status_code == 410 and error_code(audit) == "archived"
    [detail] = audit.json()["error"]["details"]
    assert detail["location"] == archived.archive.location
    assert detail["sha256"] == archived.archive.sha256 and detail["lines"] == 30
    view = (await api.get(f"/v1/campaigns/{campaign.id}")).json()
    assert view["archive"]["sha256"] == archived.archive.sha256
    assert view["counts"] == {"targeted": 30, "sent": 12, "failed": 1, "unsent": 17,
                              "suppressed": 0, "maybe_delivered": 0}
    assert view["variants"] == {"default": {"sent": 12, "failed": 1, "unsent": 17,
                                            "suppressed": 0}}
    operator = {"Authorization": f"Bearer {await mint(api, 'operator')}"}
    before = await db[names.CAMPAIGNS].count_documents({})
    for action in ("retarget", "amend", "correct"):
        refused = await api.post(f"/v1/campaigns/{campaign.id}/{action}", json={},
                                 headers=operator)
        assert refused.status_code == 410 and error_code(refused) == "archived", action
    assert await db[names.CAMPAIGNS].count_documents({}) == before  # nothing made


async def test_a_campaign_not_archived_yet_is_audited_as_before(
        api: httpx.AsyncClient, stores: Stores) -> None:
    campaign = await cancelled_paged_campaign(stores)
    audit = await api.get(f"/v1/campaigns/{campaign.id}/recipients", params={"outcome": "sent"})
    assert audit.status_code == 200 and len(audit.text.splitlines()) == 12
    assert (await api.get(f"/v1/campaigns/{campaign.id}")).json()["archive"] is None


# --- a person erased after the archive was written (issue 33, point 4: past archives) ------------
def eraser(db: Database, target: ArchiveTarget | None, pod_id: str = "api-1") -> ArchiveEraser:
    return ArchiveEraser(ArchivalStore(db), target, pod_id, POLICY)


async def test_a_person_erased_after_the_archive_is_rewritten_out_of_it(
        db: Database, stores: Stores, s3: Any, bucket: str, s3_endpoint: str) -> None:
    target = s3_target(bucket, s3_endpoint)
    campaign = await finished_with_an_erased_person(stores)
    [archived] = await archivist(db, stores, target).run(utcnow() + LATER)
    assert archived.archive is not None
    key = f"herald/archive/campaign-{campaign.id}.ndjson.gz"
    before = read_archive(s3.get_object(Bucket=bucket, Key=key)["Body"].read())
    assert await eraser(db, target).run(utcnow()) == []  # nobody waits

    erased = await erase_user(stores.devices, stores.chunks, stores.test_sends, "u11",
                              archives=ArchivalStore(db))
    assert erased.archives_pending and erased.recipients == 0  # their chunks went with the archive
    [rewritten] = await eraser(db, target).run(utcnow())

    data = s3.get_object(Bucket=bucket, Key=key)["Body"].read()
    after = read_archive(data)
    place = before.index({"token": "tok-00011", "user_id": "u11", "outcome": "failed",
                          "error": "UNREGISTERED", "variant": "default", "rule": None})
    assert after[place] == {"token": "", "erased": True, "outcome": "failed",
                            "error": "UNREGISTERED"}
    assert after[:place] + after[place + 1:] == before[:place] + before[place + 1:]
    assert b"u11" not in gzip.decompress(data) and b"tok-00011" not in gzip.decompress(data)
    record = rewritten.archive
    assert record is not None and record.rewritten_at is not None
    assert (record.sha256, record.bytes) == (hashlib.sha256(data).hexdigest(), len(data))
    assert (record.lines, record.location, record.at) == (30, archived.archive.location,
                                                          archived.archive.at)
    assert rewritten.variants == {"default": VariantCounts(sent=11, unsent=17),
                                  "erased": VariantCounts(sent=1, failed=1)}
    assert await ArchivalStore(db).waiting(10) == []  # forgotten once every archive was passed
    assert rewritten.counts == campaign.counts


async def test_an_archive_that_does_not_name_the_person_is_left_as_it_was(
        db: Database, stores: Stores, tmp_path: Path) -> None:
    target = DirectoryArchive(parse_archive_url(f"file://{tmp_path}/archive"))
    campaign = await finished_with_an_erased_person(stores)
    await archivist(db, stores, target).run(utcnow() + LATER)
    path = tmp_path / "archive" / f"campaign-{campaign.id}.ndjson.gz"
    written = path.stat().st_mtime_ns, path.read_bytes()

    erased = await erase_user(stores.devices, stores.chunks, stores.test_sends, "u-unknown",
                              archives=ArchivalStore(db))
    assert erased.archives_pending
    assert await eraser(db, target).run(utcnow()) == []
    assert (path.stat().st_mtime_ns, path.read_bytes()) == written
    assert await ArchivalStore(db).waiting(10) == []


async def test_an_archive_held_by_another_replica_keeps_the_person_queued(
        db: Database, stores: Stores, tmp_path: Path) -> None:
    target = DirectoryArchive(parse_archive_url(f"file://{tmp_path}/archive"))
    campaign = await finished_with_an_erased_person(stores)
    await archivist(db, stores, target).run(utcnow() + LATER)
    await erase_user(stores.devices, stores.chunks, stores.test_sends, "u5",
                     archives=ArchivalStore(db))
    held = await ArchivalStore(db).claim_archived(campaign.id, "api-2", utcnow(),
                                                   utcnow() + timedelta(minutes=15))
    assert held is not None

    assert await eraser(db, target).run(utcnow()) == []
    assert len(await ArchivalStore(db).waiting(10)) == 1, "forgotten before its archive was done"
    await ArchivalStore(db).release(campaign.id, "api-2")
    [rewritten] = await eraser(db, target).run(utcnow())
    assert b'"u5"' not in gzip.decompress((tmp_path / "archive" /
                                           f"campaign-{campaign.id}.ndjson.gz").read_bytes())
    assert rewritten.archive is not None and rewritten.archive.rewritten_at is not None
    assert await ArchivalStore(db).waiting(10) == []
