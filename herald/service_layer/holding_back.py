"""What each rule holds back of an audience, before the send (issue 32, point 5): the
estimate's ``held_back`` and ``quiet_hours_until``.

- ``marketing_opt_out``: devices of the audience a marketing campaign never reaches
  (``queries.held_back``); they are not among the devices it reaches;
- ``quiet_hours_held`` / ``quiet_hours_skipped``: devices whose local time is inside the quiet
  window now, planned as the dispatcher plans them (``domain/quiet_hours.plan_waves``, from
  the audience counted by timezone), and when the last held one is due;
- ``frequency_cap``: devices whose person the cap would hold back now, judged with the
  domain's ``admits`` on what the cap counted for them in Redis, read without changing it.
  A person's devices go together (the cap admits a person for a campaign once). Devices that
  quiet hours skip are left out (they are suppressed before the cap); devices held until later
  are judged as of now. The figure moves with every other marketing send meanwhile.

The last three are among the devices the campaign reaches: they are targeted, then suppressed
or sent later.
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass
from datetime import datetime

from herald.domain.audience import Audience
from herald.domain.frequency_cap import Cap, CapRule, admits, person_of, rule_for
from herald.domain.messages import ProfileNeed
from herald.domain.purpose import HoldBack, Purpose
from herald.domain.quiet_hours import (
    QuietHours,
    QuietHoursChoice,
    QuietWindow,
    in_force,
    plan_waves,
    wave_for,
)
from herald.domain.quiet_hours import forecast as quiet_forecast
from herald.domain.timing import Wave
from herald.service_layer.ports import DeviceRepository, FrequencyCaps
from herald.service_layer.queries import held_back

PEOPLE_PER_READ = 1_000
"""People whose cap history one pipelined Redis read fetches."""
NEW_CAMPAIGN = ""
"""The id of a campaign not created yet: none of a person's sends is of it."""


@dataclass(frozen=True)
class HeldBack:
    by_rule: dict[HoldBack, int]
    quiet_hours_until: datetime | None = None
    """When the last device quiet hours hold is due (None: none is held)."""


@dataclass(frozen=True)
class RuleSettings:
    cap: Cap | None
    """``HERALD_MARKETING_CAP``."""
    quiet: QuietWindow | None
    """``HERALD_QUIET_HOURS``."""


@dataclass(frozen=True)
class Asked:
    """The campaign an estimate is for: its audience, purpose and own rules."""

    audience: Audience
    reach: Audience
    purpose: Purpose
    reached: int
    quiet_hours: QuietHoursChoice | None = None
    frequency_cap: str | None = None


class HoldingBack:
    """The estimate's forecast of every rule."""

    def __init__(self, devices: DeviceRepository, caps: FrequencyCaps | None,
                 settings: RuleSettings) -> None:
        self._devices = devices
        self._caps = caps
        self._settings = settings

    async def __call__(self, asked: Asked, now: datetime) -> HeldBack:
        by_rule = await held_back(self._devices, asked.audience, asked.purpose, asked.reached)
        if asked.purpose is not Purpose.MARKETING:
            return HeldBack(by_rule)
        quiet = in_force(asked.quiet_hours, asked.purpose, self._settings.quiet)
        waves = await self._waves(asked.reach, quiet, now)
        by_zone = await self._devices.by_timezone(asked.reach) if waves else {}
        quiet_found = quiet_forecast(waves, by_zone)
        cap = rule_for(asked.purpose, asked.frequency_cap, self._settings.cap) \
            if self._caps is not None else None
        by_rule[HoldBack.FREQUENCY_CAP] = await self._capped(asked.reach, cap, waves)
        by_rule[HoldBack.QUIET_HOURS_HELD] = quiet_found.held
        by_rule[HoldBack.QUIET_HOURS_SKIPPED] = quiet_found.skipped
        return HeldBack(by_rule, quiet_found.until)

    async def _waves(self, reach: Audience, quiet: QuietHours | None,
                     now: datetime) -> list[Wave]:
        if quiet is None:
            return []
        zones = await self._devices.timezones(reach)
        return plan_waves(now, quiet.timezone, zones, quiet)

    async def _capped(self, reach: Audience, rule: CapRule | None, waves: list[Wave]) -> int:
        """Devices of ``reach`` whose person ``rule`` holds back now (skipped ones left out)."""
        if rule is None or not rule.windows or self._caps is None:
            return 0
        skips = any(wave.skipped for wave in waves)
        people: Counter[str] = Counter()
        async for _, recipient in self._devices.stream(
                reach, None, None, need=ProfileNeed() if skips else None):
            profile = recipient.profile
            zone = profile.timezone if profile else None
            if skips and (wave := wave_for(waves, zone)) is not None and wave.skipped:
                continue
            people[person_of(recipient.user_id, recipient.token)] += 1
        now_s = time.time()
        capped = 0
        everyone = list(people)
        for first in range(0, len(everyone), PEOPLE_PER_READ):
            batch = everyone[first:first + PEOPLE_PER_READ]
            histories = await self._caps.histories(batch)
            capped += sum(people[person] for person in batch
                          if not admits(histories.get(person, []), NEW_CAMPAIGN, rule.windows,
                                        now_s))
        return capped
