"""The frequency cap per person (issue 32, point 2): the setting's grammar, which campaigns it
applies to, the store's contract on the in-memory fake, and what a sender does with it (real
``SendWindow``, FCM faked): capped people recorded ``suppressed`` and never sent, counted apart,
listed in the audit with the rule, released when FCM refused them, transactional sends neither
capped nor counted."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pytest

from herald.clock import utcnow
from herald.contracts.http import DeviceIn
from herald.domain.documents import Campaign, CampaignCounts, FollowUpOf, Outcome
from herald.domain.frequency_cap import (
    NO_CAP,
    Cap,
    CapNotApplicable,
    CapRule,
    CapSpecInvalid,
    CapWindow,
    campaign_choice,
    follow_up_choice,
    normalized_choice,
    parse_cap,
    rule_for,
    setting_cap,
)
from herald.domain.messages import Recipient, SendChunk
from herald.domain.purpose import Purpose
from herald.domain.rollout import GateFigures, gate_figures, sent_and_failed
from herald.domain.status import Status
from herald.observability import MESSAGES, SUPPRESSED
from herald.runtime.tracking import WorkTracker
from herald.service_layer.erasure import erase_user
from herald.service_layer.ports import Stores
from herald.service_layer.recipients import FollowUpSource, audit
from herald.service_layer.sending.campaigns import CampaignCache
from herald.service_layer.sending.capping import Capping
from herald.service_layer.sending.chunk import ChunkSender, SendingPolicy, Settlement
from herald.service_layer.sending.claims import ChunkClaims
from herald.service_layer.sending.lifecycle import ChunkLifecycle
from herald.service_layer.sending.window import SendWindow, WindowPolicy
from herald.service_layer.stopping import PodView, Settler
from herald.settings import Settings
from services.sender.main import marketing_cap
from tests.factories import campaign, paged
from tests.unit.cap_contract import CapContract
from tests.unit.fakes import (
    FakeClock,
    FakeFcm,
    FakeFlags,
    FakeFrequencyCaps,
    FakeRegistry,
    UnlimitedBucket,
    UnlimitedLimits,
    answer_by_token,
)

POD = "s1"


# --- the setting ---------------------------------------------------------------------------------
def test_a_cap_is_windows_of_a_count_and_a_duration_shortest_first() -> None:
    assert parse_cap("3/24h") == Cap((CapWindow(86_400, 3),))
    assert parse_cap(" 10/7d, 1/1h ,3/24h") == Cap(
        (CapWindow(3_600, 1), CapWindow(86_400, 3), CapWindow(7 * 86_400, 10)))
    assert parse_cap("2/90m,5/45s") == Cap((CapWindow(45, 5), CapWindow(5_400, 2)))
    assert str(parse_cap("1/1h,3/24h,10/7d")) == "1/1h,3/1d,10/7d"


@pytest.mark.parametrize(("spec", "why"), [
    ("", "'' is not a window"),
    ("3", "'3' is not a window"),
    ("3/24", "'3/24' is not a window"),
    ("3/24x", "'3/24x' is not a window"),
    ("three/1h", "'three/1h' is not a window"),
    ("-1/1h", "'-1/1h' is not a window"),
    ("1.5/1h", "'1.5/1h' is not a window"),
    ("1/1h,", "'' is not a window"),
    ("0/1h", "0/1h allows nothing"),
    ("1/0h", "1/0h allows nothing"),
    ("1/31d", "1/31d is longer than 30 days"),
    ("1/1h,2/60m", "two windows of the same duration"),
    ("1/1s,1/2s,1/3s,1/4s,1/5s,1/6s", "more than 5 windows"),
])
def test_a_malformed_cap_is_refused_saying_what_is_wrong_and_what_is_right(
        spec: str, why: str) -> None:
    with pytest.raises(CapSpecInvalid) as refused:
        parse_cap(spec)
    assert str(refused.value).startswith(f"frequency cap {spec!r}: {why}")
    assert "<count>/<duration> with a unit of s, m, h or d" in str(refused.value)


def test_the_setting_unset_or_empty_is_no_cap() -> None:
    assert setting_cap(None) is None and setting_cap("  ") is None
    assert setting_cap("1/1h") == Cap((CapWindow(3_600, 1),))


def test_a_campaigns_own_cap_is_kept_as_written_and_only_for_marketing() -> None:
    assert campaign_choice(" 1/1h , 2/7d", Purpose.MARKETING) == "1/1h,2/7d"
    assert campaign_choice("None", Purpose.MARKETING) == NO_CAP
    assert campaign_choice(None, Purpose.TRANSACTIONAL) is None
    with pytest.raises(CapNotApplicable, match="a transactional campaign is never capped"):
        campaign_choice(NO_CAP, Purpose.TRANSACTIONAL)
    with pytest.raises(CapNotApplicable, match="legacy"):
        campaign_choice("1/1h", None)
    with pytest.raises(CapSpecInvalid):
        normalized_choice("1/1y")


def test_a_follow_up_keeps_its_originals_cap_while_it_stays_marketing() -> None:
    assert follow_up_choice(None, "1/1h", Purpose.MARKETING) == "1/1h"
    assert follow_up_choice(None, NO_CAP, Purpose.MARKETING) == NO_CAP
    assert follow_up_choice("2/1d", NO_CAP, Purpose.MARKETING) == "2/1d"
    assert follow_up_choice(None, "1/1h", Purpose.TRANSACTIONAL) is None
    with pytest.raises(CapNotApplicable):
        follow_up_choice("1/1h", None, Purpose.TRANSACTIONAL)


def test_which_sends_are_checked_and_counted() -> None:
    setting = parse_cap("3/24h")
    day = CapWindow(86_400, 3)
    assert rule_for(Purpose.MARKETING, None, setting) == CapRule((day,), 86_400)
    assert rule_for(Purpose.MARKETING, "1/1h", setting) == CapRule(
        (day, CapWindow(3_600, 1)), 86_400)  # its own cap adds to the setting's: only lower
    assert rule_for(Purpose.MARKETING, "1/7d", setting) == CapRule(
        (day, CapWindow(604_800, 1)), 604_800)
    assert rule_for(Purpose.MARKETING, NO_CAP, setting) == CapRule((), 86_400)  # counted
    assert rule_for(Purpose.TRANSACTIONAL, None, setting) is None  # neither capped nor counted
    assert rule_for(None, None, setting) is None  # stored before purposes: as it was
    assert rule_for(Purpose.MARKETING, None, None) is None  # no cap anywhere: no Redis call
    assert rule_for(Purpose.MARKETING, NO_CAP, None) is None
    assert rule_for(Purpose.MARKETING, "1/1h", None) == CapRule((CapWindow(3_600, 1),), 3_600)


# --- the store -------------------------------------------------------------------------------------
class TestFakeFrequencyCaps(CapContract):
    @pytest.fixture
    def caps(self) -> FakeFrequencyCaps:
        return FakeFrequencyCaps()


# --- a sender ------------------------------------------------------------------------------------
@dataclass
class Rig:
    stores: Stores
    registry: FakeRegistry
    clock: FakeClock
    view: PodView
    caps: FakeFrequencyCaps
    fcm: FakeFcm

    def sender(self, setting: str | None = "1/24h",
               on_request: Callable[[str], None] | None = None) -> ChunkSender:
        if on_request is not None:
            self.fcm = FakeFcm(answer_by_token, on_request)
        window = SendWindow(self.fcm, WindowPolicy(connections=1, unrecorded=2, max_retries=0),
                            UnlimitedBucket())
        settler = Settler(self.stores, self.registry, POD)
        return ChunkSender(
            ChunkLifecycle(self.stores, POD, self.clock, settled=settler.settled),
            CampaignCache(self.stores.campaigns, self.view), window, UnlimitedLimits(),
            ChunkClaims(self.stores.chunks, self.registry, POD, 60.0, self.clock),
            WorkTracker().working_on, SendingPolicy(max_attempts=3, budget_s=60.0),
            settle=settler.settle, capping=Capping(self.caps, setting_cap(setting)))

    async def send(self, recipients: list[Recipient], *, setting: str | None = "1/24h",
                   **changes: object) -> Campaign:
        """A campaign of one chunk of ``recipients`` (marketing unless ``changes`` say
        otherwise) sent through; the campaign as it ended."""
        record = campaign(**{**paged(1, len(recipients)), "purpose": Purpose.MARKETING,
                             **changes})
        await self.stores.campaigns.insert(record)
        await self.stores.chunks.create(record.id, 0, recipients, None, utcnow())
        chunk = SendChunk(campaign_id=record.id, seq=0, recipients=recipients)
        assert await self.sender(setting).process(chunk, lambda: False) is Settlement.ACK
        done = await self.stores.campaigns.get(record.id)
        assert done is not None and done.status is Status.COMPLETED
        return done

    def sent_since(self, mark: int) -> list[str]:
        return self.fcm.sent[mark:]


@pytest.fixture
def rig(stores: Stores, flags: FakeFlags, registry: FakeRegistry, clock: FakeClock) -> Rig:
    return Rig(stores, registry, clock, PodView(stores.campaigns, flags), FakeFrequencyCaps(),
               FakeFcm())


def people(*numbers: int, device: int = 0) -> list[Recipient]:
    return [Recipient(token=f"tok-{n}-{device}", user_id=f"user-{n}") for n in numbers]


async def test_a_capped_person_is_suppressed_not_sent_counted_apart_and_audited_with_the_rule(
        rig: Rig, stores: Stores) -> None:
    first = await rig.send(people(1, 2, 3))
    suppressed_before = SUPPRESSED.labels("frequency_cap")._value.get()
    sent_before = MESSAGES.labels("sent", "", "standard")._value.get()
    mark = len(rig.fcm.sent)
    second = await rig.send(people(1, 2, 4))
    assert first.counts == CampaignCounts(targeted=3, sent=3)
    assert rig.sent_since(mark) == ["tok-4-0"]
    assert second.counts == CampaignCounts(targeted=3, sent=1, suppressed=2)
    assert second.counts.unsent == 0  # sent + failed + unsent + suppressed = targeted
    lines = [line async for line in audit(stores, second, Outcome.SUPPRESSED)]
    assert [(ln.token, ln.user_id, ln.error, ln.rule) for ln in lines] == [
        ("tok-1-0", "user-1", None, "frequency_cap"), ("tok-2-0", "user-2", None, "frequency_cap")]
    assert lines[0].as_dict()["outcome"] == "suppressed"
    assert [line.token async for line in audit(stores, second, Outcome.UNSENT)] == []
    assert SUPPRESSED.labels("frequency_cap")._value.get() - suppressed_before == 2
    assert MESSAGES.labels("sent", "", "standard")._value.get() - sent_before == 1
    state = await stores.chunks.state(second.id, 0)
    assert state is not None and (state.sent, state.failed, state.suppressed) == (1, 0, 2)


async def test_a_person_with_several_devices_gets_a_campaign_on_each_and_counts_it_once(
        rig: Rig) -> None:
    phones = people(1, device=0) + people(1, device=1) + people(1, device=2)
    first = await rig.send(phones, setting="2/24h")
    second = await rig.send(phones, setting="2/24h")
    third = await rig.send(phones, setting="2/24h")
    assert (first.counts.sent, second.counts.sent) == (3, 3)  # two campaigns, six pushes
    assert third.counts == CampaignCounts(targeted=3, suppressed=3)


async def test_a_device_without_a_user_id_is_a_person_of_its_own(rig: Rig) -> None:
    anonymous = [Recipient(token="tok-a"), Recipient(token="tok-b")]
    await rig.send(anonymous[:1])
    second = await rig.send(anonymous)
    assert second.counts == CampaignCounts(targeted=2, sent=1, suppressed=1)


async def test_transactional_sends_are_neither_capped_nor_counted(rig: Rig) -> None:
    for _ in range(2):
        receipt = await rig.send(people(1), purpose=Purpose.TRANSACTIONAL)
        assert receipt.counts.sent == 1
    assert rig.caps.history == {}  # nothing counted
    assert (await rig.send(people(1))).counts.sent == 1  # the marketing one still passes
    assert (await rig.send(people(1))).counts.suppressed == 1
    assert (await rig.send(people(1), purpose=Purpose.TRANSACTIONAL)).counts.sent == 1


async def test_a_request_fcm_refused_counts_no_more(rig: Rig) -> None:
    dead = [Recipient(token="unregistered-1", user_id="user-1")]
    refused = await rig.send(dead)
    second = await rig.send(people(1))  # user-1's other device
    assert refused.counts == CampaignCounts(targeted=1, failed=1)
    assert second.counts.sent == 1
    assert (await rig.send(people(1))).counts.suppressed == 1


async def test_sends_that_never_left_are_released_and_the_next_delivery_sends_them(
        rig: Rig, stores: Stores) -> None:
    recipients = people(1, 2, 3, 4, 5)
    record = campaign(**{**paged(1, 5), "purpose": Purpose.MARKETING})
    await stores.campaigns.insert(record)
    await stores.chunks.create(record.id, 0, recipients, None, utcnow())
    chunk = SendChunk(campaign_id=record.id, seq=0, recipients=recipients)
    stopping = rig.sender(on_request=lambda _token: stopping.stop())  # a SIGTERM mid-chunk
    assert await stopping.process(chunk, lambda: False) is Settlement.REPUBLISH
    sent = [f"u:user-{token.split('-')[1]}" for token in rig.fcm.sent]
    assert 0 < len(sent) < 5
    assert sorted(p for p, sends in rig.caps.history.items() if sends) == sorted(sent)
    await ChunkClaims(stores.chunks, rig.registry, POD, 60.0, rig.clock).release(
        record.id, 0, refund=True)  # what settling REPUBLISH does
    assert await rig.sender().process(chunk, lambda: False) is Settlement.ACK
    done = await stores.campaigns.get(record.id)
    assert done is not None and done.counts == CampaignCounts(targeted=5, sent=5)
    assert sorted(rig.fcm.sent) == sorted(r.token for r in recipients)


async def test_a_campaign_opted_out_reaches_capped_people_and_still_counts(rig: Rig) -> None:
    await rig.send(people(1))
    assert (await rig.send(people(1), frequency_cap=NO_CAP)).counts.sent == 1
    own = await rig.send(people(2, 3), frequency_cap="1/24h", setting="2/24h")
    assert own.counts.sent == 2
    lowered = await rig.send(people(1, 2), frequency_cap="1/7d", setting="5/24h")
    assert lowered.counts == CampaignCounts(targeted=2, suppressed=2)


async def test_without_a_cap_nothing_is_counted_nor_suppressed(rig: Rig) -> None:
    for _ in range(3):
        assert (await rig.send(people(1), setting=None)).counts.sent == 1
    assert rig.caps.history == {}


async def test_a_retarget_leaves_the_suppressed_out_unless_asked(rig: Rig, stores: Stores) -> None:
    await rig.send(people(1))
    parent = await rig.send(people(1, 2))
    plain = FollowUpSource(stores, parent, FollowUpOf.UNSENT)
    asked = FollowUpSource(stores, parent, FollowUpOf.UNSENT, with_suppressed=True)
    assert [r.token async for _, r in plain.stream(None)] == []
    assert [(p, r.token) async for p, r in asked.stream(None)] == [(1, "tok-1-0")]


def test_a_staged_rollouts_gate_and_counts_leave_the_suppressed_out() -> None:
    recorded = [None, "suppressed:frequency_cap", "UNAVAILABLE", "suppressed:frequency_cap"]
    assert gate_figures(recorded) == GateFigures(failed=1, attempted=2)
    assert sent_and_failed(recorded) == (1, 1)


def test_a_sender_refuses_to_start_with_a_cap_it_cannot_read() -> None:
    assert marketing_cap(Settings.model_construct(marketing_cap=None)) is None
    assert marketing_cap(Settings.model_construct(marketing_cap="2/1d")) == parse_cap("2/24h")
    with pytest.raises(SystemExit, match="invalid configuration\n  HERALD_MARKETING_CAP: "
                                         "frequency cap '3/24x': '3/24x' is not a window"):
        marketing_cap(Settings.model_construct(marketing_cap="3/24x"))


async def test_an_erased_person_is_forgotten_by_the_cap(rig: Rig, stores: Stores) -> None:
    await stores.devices.upsert([DeviceIn(token="tok-1-0", user_id="user-1", platform="ios")],
                                utcnow())
    await rig.send([*people(1), Recipient(token="tok-1-0")])  # as the user, and as the device
    await rig.send(people(2))
    assert set(rig.caps.history) == {"u:user-1", "t:tok-1-0", "u:user-2"}
    await erase_user(stores.devices, stores.chunks, stores.test_sends, "user-1", caps=rig.caps)
    assert set(rig.caps.history) == {"u:user-2"}
