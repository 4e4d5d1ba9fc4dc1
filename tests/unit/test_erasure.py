"""A person leaves (issue 33): their devices go, every record forgets them, every count stays."""

from __future__ import annotations

from herald.clock import utcnow
from herald.domain.documents import (
    Campaign,
    CampaignCounts,
    Dispatch,
    FollowUpOf,
    Outcome,
    TestOutcome,
    TestSend,
    new_id,
)
from herald.domain.fcm_errors import ERASED
from herald.domain.messages import Recipient, SendChunk
from herald.domain.rendering import compile_content
from herald.domain.status import Status
from herald.service_layer.erasure import Erasure, erase_user, unregister_device
from herald.service_layer.ports import Stores
from herald.service_layer.recipients import FollowUpSource, audit, final_counts
from herald.service_layer.sending.chunk import targets
from services.api.log_paths import loggable
from tests.factories import actor, at, device, insert, recipients


async def finished_campaign(stores: Stores) -> Campaign:
    """Three chunks of ten (``tok-00000`` … ``tok-00029``, users ``u0`` … ``u29``): the first
    sent, two of the second failed, the third unsent."""
    campaign_id = await insert(stores, status=Status.COMPLETED,
                               dispatch=Dispatch(owner=None, next_seq=3, done=True),
                               counts=CampaignCounts(targeted=30))
    now = utcnow()
    for seq in range(3):
        await stores.chunks.create(campaign_id, seq, recipients(10 * seq, 10 * seq + 10),
                                   cursor=None, now=now)
    await stores.deliveries.record(campaign_id, 0, "s1", at([(p, None) for p in range(10)]), now)
    await stores.deliveries.record(campaign_id, 1, "s1", at([(0, "QUOTA_EXCEEDED"),
                                                          (1, "UNREGISTERED")]), now)
    found = await stores.campaigns.get(campaign_id)
    assert found is not None
    return found


async def erase(stores: Stores, user_id: str) -> Erasure:
    return await erase_user(stores.devices, stores.chunks, stores.test_sends, user_id)


async def listed(stores: Stores, campaign: Campaign) -> dict[Outcome, list[str]]:
    return {outcome: [line.token async for line in audit(stores, campaign, outcome)]
            for outcome in Outcome}


async def test_a_person_is_no_longer_listed_but_still_counted(stores: Stores) -> None:
    campaign = await finished_campaign(stores)
    before = await final_counts(stores, campaign)
    # dana's two phones were tok-00003 (sent) and tok-00010 (failed); the chunk knew them as u3
    # and u10, and the device registry knows them as dana's
    await stores.devices.upsert([device(3, user_id="dana"), device(10, user_id="dana"),
                                 device(4)], utcnow())

    erased = await erase(stores, "dana")

    assert erased == Erasure(devices=2, recipients=2, test_outcomes=0)
    assert await stores.devices.of_user("dana") == []
    assert await stores.devices.find_by_token("tok-00004") is not None
    assert await final_counts(stores, campaign) == before
    lines = await listed(stores, campaign)
    assert "tok-00003" not in lines[Outcome.SENT] and len(lines[Outcome.SENT]) == 9
    assert "tok-00010" not in lines[Outcome.FAILED] and len(lines[Outcome.FAILED]) == 1


async def test_records_with_only_the_user_id_are_erased_too(stores: Stores) -> None:
    """The device was unregistered earlier; the chunk still names the user."""
    campaign = await finished_campaign(stores)
    assert await erase(stores, "u25") == Erasure(devices=0, recipients=1, test_outcomes=0)
    chunk = [c async for c in stores.chunks.in_order(campaign.id)][2]
    assert chunk.recipients[5] == Recipient.erased_placeholder()
    assert chunk.state.erased == 1
    assert not any(r.user_id == "u25" or r.token == "tok-00025" for r in chunk.recipients)


async def test_erasing_again_finds_nothing_more(stores: Stores) -> None:
    await finished_campaign(stores)
    await stores.devices.upsert([device(3, user_id="dana")], utcnow())
    assert (await erase(stores, "dana")).recipients == 1
    assert await erase(stores, "dana") == Erasure(devices=0, recipients=0, test_outcomes=0)


async def test_a_retarget_skips_the_erased_and_keeps_everyone_else_in_place(
        stores: Stores) -> None:
    """A follow-up pages its parent's audit by position: an erasure between two pages must
    neither shift the rest (skipping someone) nor reach the erased person."""
    campaign = await finished_campaign(stores)
    source = FollowUpSource(stores, campaign, FollowUpOf.UNSENT)
    before = [(position, r.token) async for position, r in source.stream(after=None)]

    await erase(stores, "u21")

    after = [(position, r.token) async for position, r in source.stream(after=None)]
    assert after == [(p, token) for p, token in before if token != "tok-00021"]
    resumed = [(position, r.token) async for position, r in source.stream(after=5)]
    assert resumed == [(p, token) for p, token in before[5:] if token != "tok-00021"]


async def test_a_retry_never_reaches_an_erased_person_whose_send_failed(stores: Stores) -> None:
    campaign = await finished_campaign(stores)
    await erase(stores, "u10")  # its quota failure would otherwise be retried
    source = FollowUpSource(stores, campaign, FollowUpOf.NOT_SENT)
    assert "tok-00010" not in [r.token async for _, r in source.stream(after=None)]


async def test_test_sends_keep_the_answer_and_forget_the_device(stores: Stores) -> None:
    theirs = TestOutcome(device_id="d1", token_suffix="00000003", user_id="dana")
    other = TestOutcome(device_id="d2", token_suffix="00000004", user_id="u4",
                        error="UNREGISTERED")
    await stores.test_sends.insert(TestSend(
        id=new_id(), campaign_id="c", at=utcnow(), by=actor("ops"),
        status=Status.PENDING, outcomes=(theirs, other)))

    assert (await erase(stores, "dana")).test_outcomes == 1

    [record] = await stores.test_sends.of_campaign("c")
    assert record.outcomes == (TestOutcome(device_id="", token_suffix="", user_id=None,
                                           erased=True), other)


def test_a_sender_records_an_erased_recipient_as_failed_without_sending_to_it() -> None:
    chunk = SendChunk(campaign_id="a" * 24, seq=0, recipients=[
        Recipient(token="tok-1"), Recipient.erased_placeholder(), Recipient(token="tok-3")])
    todo, refused = targets(chunk, {}, compile_content("Hi", "Now", {}, {}, replace_key="k"))
    assert [target.token for target in todo] == ["tok-1", "tok-3"]
    assert [(outcome.position, outcome.error) for outcome in refused] == [(1, ERASED)]


def test_an_erased_placeholder_travels_in_a_chunk_message() -> None:
    """A chunk offered again after an erasure is published from the store, placeholders in."""
    message = SendChunk(campaign_id="a" * 24, seq=0, recipients=[
        Recipient(token="tok-1"), Recipient.erased_placeholder()])
    again = SendChunk.model_validate_json(message.model_dump_json(exclude_none=True))
    assert again.recipients[1].erased and again.recipients[1].token == ""


async def test_unregistering_a_device_removes_it_alone(stores: Stores) -> None:
    await stores.devices.upsert([device(1, user_id="dana"), device(2, user_id="dana")], utcnow())
    assert await unregister_device(stores.devices, "tok-00001") is True
    assert await unregister_device(stores.devices, "tok-00001") is False
    assert [d.token for d in await stores.devices.of_user("dana")] == ["tok-00002"]


def test_a_log_line_never_shows_a_token_or_user_id_from_a_path() -> None:
    assert loggable("/v1/devices/fcm-token-of-someone") == "/v1/devices/…"
    assert loggable("/v1/users/dana@example.com") == "/v1/users/…"
    assert loggable("/v1/devices/bulk") == "/v1/devices/bulk"
    assert loggable("/v1/campaigns/" + "a" * 24) == "/v1/campaigns/" + "a" * 24


async def test_a_chunk_paged_while_the_devices_are_deleted_is_erased_too(stores: Stores) -> None:
    """A dispatcher read dana's device before it went and writes its chunk after the records'
    first pass: the second pass, with the tokens read at the start, erases it there too."""
    campaign = await finished_campaign(stores)
    await stores.devices.upsert([device(3, user_id="dana")], utcnow())
    deleting = stores.devices.delete_of_user

    async def paged_meanwhile(user_id: str) -> int:
        await stores.chunks.create(campaign.id, 3, recipients(3, 4), cursor=None, now=utcnow())
        return await deleting(user_id)

    stores.devices.delete_of_user = paged_meanwhile  # type: ignore[method-assign]
    assert await erase(stores, "dana") == Erasure(devices=1, recipients=2, test_outcomes=0)
    chunk = [c async for c in stores.chunks.in_order(campaign.id)][3]
    assert chunk.recipients == (Recipient.erased_placeholder(),)
