"""A sender's answer to FCM refusing a whole campaign (herald/service_layer/sending/refusals.py): the
campaign stops here at once and everywhere once, with one ERROR line; tokens of another project
are excluded only when they are few."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable

import pytest

from herald.domain.documents import Campaign
from herald.domain.fcm_errors import WRONG_PROJECT_MIN_ANSWERS, FcmError
from herald.domain.outcomes import RecipientOutcome, Target
from herald.domain.status import Verdict
from herald.service_layer.sending.refusals import CampaignRefusals, reason_for
from herald.service_layer.stopping import PodView
from tests.unit.fakes import FakeCampaigns, FakeFlags


class ReadCampaigns(FakeCampaigns):
    """Remembers which campaigns were read (a pod learning a decision reads it)."""

    def __init__(self) -> None:
        super().__init__()
        self.read: list[str] = []

    async def get(self, campaign_id: str) -> Campaign | None:
        self.read.append(campaign_id)
        return await super().get(campaign_id)


class Rig:
    def __init__(self) -> None:
        self.campaigns = ReadCampaigns()
        self.view = PodView(self.campaigns, FakeFlags())
        self.stops: list[tuple[str, str]] = []
        self.tasks: list[asyncio.Task[None]] = []
        self.refusals = CampaignRefusals(self.view, self._stop_for_error, self._spawn)

    def stopped_here(self, campaign_id: str) -> bool:
        return self.view.known(campaign_id) is Verdict.STOP

    async def _stop_for_error(self, campaign_id: str, reason: str) -> str | None:
        self.stops.append((campaign_id, reason))
        return campaign_id

    def _spawn(self, work: Awaitable[None], _name: str) -> None:
        async def run() -> None:
            await work
        self.tasks.append(asyncio.ensure_future(run()))

    async def settle(self) -> None:
        await asyncio.gather(*self.tasks)


async def test_the_first_refusal_stops_the_campaign_here_and_everywhere_once(
        caplog: pytest.LogCaptureFixture) -> None:
    rig = Rig()
    with caplog.at_level(logging.ERROR):
        for _ in range(5):
            rig.refusals.stop("c1", FcmError.INVALID_PAYLOAD, "Message is too big")
        assert rig.stopped_here("c1")  # stopped here at once
        await rig.settle()
    reason = reason_for(FcmError.INVALID_PAYLOAD, "Message is too big")
    assert rig.stops == [("c1", reason)]
    assert rig.campaigns.read == ["c1"]  # then it reads the decision, to acknowledge it
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1 and "Message is too big" in errors[0].getMessage()


def answers(mismatched: int, accepted: int) -> list[RecipientOutcome]:
    return ([RecipientOutcome(Target(i, f"m{i}"), FcmError.SENDER_ID_MISMATCH)
             for i in range(mismatched)]
            + [RecipientOutcome(Target(i, f"ok{i}"), None) for i in range(accepted)])


async def test_a_few_mismatched_tokens_are_retired_once_the_answers_say_they_are_few() -> None:
    rig = Rig()
    assert rig.refusals.mismatched_to_retire("c1", answers(2, 5)) == []  # too soon to tell
    released = rig.refusals.mismatched_to_retire("c1", answers(0, WRONG_PROJECT_MIN_ANSWERS))
    assert released == ["m0", "m1"]  # 2 of 57: sure enough the credentials are right
    assert rig.refusals.mismatched_to_retire(
        "c1", [RecipientOutcome(Target(9, "m9"), FcmError.SENDER_ID_MISMATCH)]) == ["m9"]
    assert not rig.stopped_here("c1")


async def test_nearly_all_tokens_mismatched_mean_a_wrong_project_retire_nothing_and_stop(
        ) -> None:
    rig = Rig()
    assert rig.refusals.mismatched_to_retire("c1", answers(80, 0)) == []
    assert not rig.stopped_here("c1"), "80 of 80 are not sure enough yet"
    assert rig.refusals.mismatched_to_retire("c1", answers(100, 1)) == []
    assert rig.stopped_here("c1")
    await rig.settle()
    [(campaign_id, reason)] = rig.stops
    assert campaign_id == "c1" and "SENDER_ID_MISMATCH" in reason and "project" in reason
    assert rig.refusals.mismatched_to_retire("c1", answers(1, 100)) == []


async def test_each_campaign_is_counted_apart() -> None:
    rig = Rig()
    rig.refusals.mismatched_to_retire("c1", answers(100, 0))
    assert rig.stopped_here("c1")
    assert rig.refusals.mismatched_to_retire("c2", answers(1, 60)) == ["m0"]
    assert not rig.stopped_here("c2")


async def test_a_migration_leaving_70_percent_of_old_tokens_never_stops_in_groups_of_one(
        ) -> None:
    """Issue 30: 7 mismatches in every 10 answers, told one answer at a time."""
    rig = Rig()
    released: list[str] = []
    for i in range(5_000):
        error = FcmError.SENDER_ID_MISMATCH if i % 10 < 7 else None
        released += rig.refusals.mismatched_to_retire(
            "c1", [RecipientOutcome(Target(i, f"t{i}"), error)])
    assert not rig.stopped_here("c1") and rig.stops == []
    assert len(released) == 3_500, "every mismatched token retired once the answers tell"


async def test_answers_that_do_not_tell_a_tokens_project_are_not_counted() -> None:
    """Dead tokens and outages say nothing of the credentials' project."""
    rig = Rig()
    noise = [RecipientOutcome(Target(i, f"n{i}"), error) for i, error in enumerate(
        [FcmError.UNREGISTERED, FcmError.INVALID_ARGUMENT, FcmError.UNAVAILABLE] * 100)]
    assert rig.refusals.mismatched_to_retire("c1", noise + answers(86, 0)) == []
    assert rig.stopped_here("c1"), "86 of 86 telling answers: a wrong project"
