"""The forecasts the api answers (herald/service_layer/forecasting.py): what the simulation is
given — the running campaigns' remaining recipients, in waves after their holds, the fleet's
rate measured or assumed — on in-memory fakes of the stores."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest

from herald.clock import utcnow
from herald.domain.audience import Audience
from herald.domain.documents import (
    Campaign,
    CampaignCounts,
    Dispatch,
    FollowUp,
    FollowUpOf,
    LocalTime,
)
from herald.domain.forecast import Phase
from herald.domain.lanes import Lane
from herald.domain.pods import PodBeat
from herald.domain.rollout import Rollout, RolloutProgress, RolloutWave
from herald.domain.status import Status
from herald.service_layer import forecasting
from herald.service_layer.forecasting import (
    Forecaster,
    ForecastSettings,
    fleet_rates,
    job_of,
    known_size,
)
from tests.factories import campaign, device
from tests.unit.fakes import FakeCampaigns, FakeDevices, FakeRegistry

SETTINGS = ForecastSettings(project_rate_per_s=10_000, urgent_reserve_share=0.2,
                            default_sender_rate_per_s=1_000)
WAVES = (RolloutWave(10, 60), RolloutWave(50, 30), RolloutWave(100))


class Measure:
    def __init__(self, per_sender: float | None = None) -> None:
        self.per_sender = per_sender

    async def per_sender_per_s(self) -> float | None:
        return self.per_sender


def sending(**changes: object) -> Campaign:
    return campaign(status=Status.IN_PROGRESS, **changes)


# --- the inputs -----------------------------------------------------------------------------------
def test_the_fleet_is_the_senders_rate_within_the_projects_and_bulk_keeps_the_reserve_away() -> None:
    assert fleet_rates(SETTINGS, 2, None).total_per_s == 2_000  # the default per sender
    assert fleet_rates(SETTINGS, 2, 1_500.0).total_per_s == 3_000  # measured
    assert fleet_rates(SETTINGS, 40, 1_500.0).total_per_s == 10_000  # the project's rate
    assert fleet_rates(SETTINGS, 0, 1_500.0).total_per_s == 0  # nobody to send
    assert fleet_rates(SETTINGS, 2, None).bulk_per_s == 8_000


def test_a_campaign_paged_to_the_end_has_its_targeted_less_what_is_recorded() -> None:
    paged = sending(dispatch=Dispatch(owner="d", done=True),
                    counts=CampaignCounts(targeted=10_000, sent=3_000, failed=500))
    assert known_size(paged) == 10_000
    assert job_of(paged, 10_000, utcnow()).phases == (Phase(6_500),)  # type: ignore[union-attr]


def test_a_campaign_still_paging_is_sized_by_its_count_when_made_or_not_known() -> None:
    assert known_size(sending(counts=CampaignCounts(targeted=6_000))) is None
    assert known_size(sending(audience_estimate=50_000, counts=CampaignCounts(targeted=6_000))
                      ) == 50_000
    # Local time: what is paged now (its later waves are hours away).
    assert known_size(sending(local_time=LocalTime("09:00", "UTC"),
                              counts=CampaignCounts(targeted=700))) == 700


def test_nothing_left_to_send_is_no_job() -> None:
    done = sending(counts=CampaignCounts(targeted=10, sent=10))
    assert job_of(done, 10, utcnow()) is None


def test_a_rollout_sending_its_wave_and_one_holding_between_waves() -> None:
    now = utcnow()
    rollout = Rollout(WAVES)
    in_wave = sending(rollout=rollout, rate_per_s=100, lane=Lane.BULK,
                      rollout_progress=RolloutProgress(wave=1, sent=2_000))
    job = job_of(in_wave, 10_000, now)
    assert job is not None
    assert (job.phases, job.starts_in_s, job.rate_per_s, job.lane) == (
        (Phase(3_000, 30), Phase(5_000, 0)), 0.0, 100, Lane.BULK)
    holding = sending(rollout=rollout, rollout_progress=RolloutProgress(
        wave=0, sent=990, failed=10, hold_until=now + timedelta(seconds=45)))
    job = job_of(holding, 10_000, now)
    assert job is not None
    assert job.phases == (Phase(4_000, 30), Phase(5_000, 0))
    assert job.starts_in_s == pytest.approx(45)


# --- the forecaster on fakes -------------------------------------------------------------------
@pytest.fixture
async def registry() -> FakeRegistry:
    pods = FakeRegistry()
    for i in (1, 2):
        await pods.beat(PodBeat(id=f"sender-{i}", service="sender", host="h", pid=i,
                                version="t", started_at=0))
    await pods.beat(PodBeat(id="api-1", service="api", host="h", pid=3, version="t",
                            started_at=0))
    return pods


async def test_a_new_campaign_shares_the_fleet_with_the_running_ones_of_its_lane_and_above(
        registry: FakeRegistry) -> None:
    campaigns = FakeCampaigns()
    paged = dict(dispatch=Dispatch(owner="d", done=True))
    await campaigns.insert(sending(counts=CampaignCounts(targeted=10_000, sent=4_000), **paged))
    await campaigns.insert(sending(lane=Lane.URGENT, counts=CampaignCounts(targeted=2_000),
                                   **paged))
    await campaigns.insert(sending(lane=Lane.BULK, counts=CampaignCounts(targeted=90_000),
                                   **paged))
    await campaigns.insert(campaign(status=Status.PAUSED, counts=CampaignCounts(targeted=9_999)))
    forecaster = Forecaster(campaigns, FakeDevices(), registry, Measure(1_500), SETTINGS)

    forecast = await forecaster.new_campaign(20_000, Lane.STANDARD, None, None)

    # 3,000/s: urgent's 2,000 first (0.67 s), then 1,500/s each until the other's 6,000 are
    # sent (4 s), then the rest (20,000 - 6,000 = 14,000) alone: 4.67 s.
    assert forecast.finishes_in_s == pytest.approx(2 / 3 + 4 + 14 / 3)
    assert (forecast.fleet_rate_per_s, forecast.fleet_rate_measured) == (3_000, True)
    assert forecast.recipients_ahead == 8_000  # the bulk campaign is not ahead of it
    bulk = await forecaster.new_campaign(1_000, Lane.BULK, None, None)
    assert bulk.recipients_ahead == 8_000 + 90_000


async def test_before_any_measurement_each_live_sender_counts_the_default(
        registry: FakeRegistry) -> None:
    forecaster = Forecaster(FakeCampaigns(), FakeDevices(), registry, Measure(), SETTINGS)
    forecast = await forecaster.new_campaign(20_000, Lane.STANDARD, 500, None)
    assert (forecast.finishes_in_s, forecast.fleet_rate_per_s) == (pytest.approx(40), 2_000)
    assert forecast.fleet_rate_measured is False


async def test_no_sender_alive_means_no_forecast() -> None:
    forecaster = Forecaster(FakeCampaigns(), FakeDevices(), FakeRegistry(), Measure(), SETTINGS)
    assert (await forecaster.new_campaign(10, Lane.URGENT, None, None)).finishes_in_s is None


async def test_a_running_campaign_still_paging_is_counted_once(
        registry: FakeRegistry, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(forecasting, "LOAD_TTL_S", 0.0)  # every forecast reads the load
    devices = FakeDevices()
    await devices.upsert([device(i, topics=["t"]) for i in range(50)], utcnow())
    campaigns = FakeCampaigns()
    paging = sending(audience=Audience(topics=["t"]), counts=CampaignCounts(targeted=10, sent=5))
    await campaigns.insert(paging)
    forecaster = Forecaster(campaigns, devices, registry, Measure(), SETTINGS)
    assert (await forecaster.new_campaign(0, Lane.STANDARD, None, None)).recipients_ahead == 45
    await devices.upsert([device(i, topics=["t"]) for i in range(50, 60)], utcnow())
    assert (await forecaster.new_campaign(0, Lane.STANDARD, None, None)).recipients_ahead == 45


async def test_a_follow_up_is_sized_by_its_originals_counts(registry: FakeRegistry) -> None:
    campaigns = FakeCampaigns()
    original = campaign(status=Status.CANCELLED,
                        counts=CampaignCounts(targeted=1_000, sent=300, failed=100))
    await campaigns.insert(original)
    for outcome, size in ((FollowUpOf.UNSENT, 600), (FollowUpOf.SENT, 300),
                          (FollowUpOf.NOT_SENT, 700)):
        follow_up = sending(audience=None, follow_up=FollowUp(original.id, outcome))
        forecaster = Forecaster(campaigns, FakeDevices(), registry, Measure(), SETTINGS)
        forecast = await forecaster.campaign(follow_up)
        assert forecast is not None
        assert forecast.finishes_in_s == pytest.approx(size / 2_000)


async def test_a_sending_campaigns_eta_counts_itself_once_and_none_when_it_does_not_send(
        registry: FakeRegistry) -> None:
    campaigns = FakeCampaigns()
    mine = sending(dispatch=Dispatch(owner="d", done=True),
                   counts=CampaignCounts(targeted=10_000, sent=2_000))
    await campaigns.insert(mine)
    forecaster = Forecaster(campaigns, FakeDevices(), registry, Measure(1_000), SETTINGS)
    forecast = await forecaster.campaign(replace(mine, counts=CampaignCounts(
        targeted=10_000, sent=4_000)))  # newer counts than the load read
    assert forecast is not None
    assert forecast.finishes_in_s == pytest.approx(3)
    assert forecast.finishes_at == forecast.at + timedelta(seconds=forecast.finishes_in_s)
    assert forecast.recipients_ahead == 0
    for status in (Status.PAUSED, Status.SCHEDULED, Status.COMPLETED):
        assert await forecaster.campaign(replace(mine, status=status)) is None


async def test_beside_many_running_campaigns_the_simulation_runs_off_the_event_loop(
        registry: FakeRegistry) -> None:
    """151 campaigns share 2,000/s equally until the 150 of 100 are sent (7.55 s); the new
    one's last 900 then go alone (0.45 s). Over ``INLINE_JOBS``: in a worker thread."""
    campaigns = FakeCampaigns()
    for _ in range(150):
        await campaigns.insert(sending(dispatch=Dispatch(owner="d", done=True),
                                       counts=CampaignCounts(targeted=100)))
    forecaster = Forecaster(campaigns, FakeDevices(), registry, Measure(), SETTINGS)
    assert len((await forecaster.load()).jobs) > forecasting.INLINE_JOBS
    forecast = await forecaster.new_campaign(1_000, Lane.STANDARD, None, None)
    assert forecast.finishes_in_s == pytest.approx(8.0)
