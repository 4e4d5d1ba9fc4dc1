"""The one question every sender, dispatcher and dead-chunk handler asks about a campaign:
``verdict(campaign) → send | hold | stop`` (``herald.domain.status.Verdict``).

The answer is the campaign's stored status (``verdict_for``), as this pod knows it:

- told early by a broadcast (``hear``): a cancel or a stop at once, since nothing undoes them;
  a pause or a resume at once too when it replaces the latest decision this pod knows (the
  broadcast names both), else by reading the store first, so an old broadcast that arrives after
  a newer decision changes nothing (the store holds the latest decision);
- read again from the store when what the pod knows is older than ``refresh_s`` (a pod that
  missed a broadcast, a resume or a pause, learns it within that), and from the cancel's Redis
  flag at most once a second while it sends;
- learned from any read of the campaign another part of the pod made (``learn``).

A stop is never undone here. Each campaign has an ``asyncio.Event``, set while its verdict is not
``send``: the window checks it right before every request, and a sender waiting out a back-off
wakes the moment it is set. When a pod learns of a decision that stops sending (a cancel, a stop,
a pause), however it learned it, it is passed once to ``on_decision`` (the acknowledge path).
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field

from herald.clock import utcnow
from herald.domain.documents import Campaign, Decision, DecisionKind
from herald.domain.status import Verdict, verdict_for
from herald.service_layer.ports import CampaignLookup, CancelFlags
from herald.service_layer.stopping.pods import FLAG_REFRESH_S

REFRESH_S = 0.25
"""How old what a pod knows of a sending campaign may be before it reads the store again."""
HOLD_REFRESH_S = 0.5
"""The same for a held campaign: a resume the pod missed is learned within this."""
REMEMBERED = 10_000
"""Campaigns a pod remembers (the least recently asked about are forgotten, and read again)."""

OnDecision = Callable[[str, Decision], None]


@dataclass
class _Known:
    verdict: Verdict
    read_at: float
    flag_read_at: float
    event: asyncio.Event = field(default_factory=asyncio.Event)
    latest: str | None = None
    """The id of the latest decision this pod knows of (None: none yet)."""
    decisions: set[str] = field(default_factory=set)
    """Stopping decisions passed on to ``on_decision`` already."""


class PodView:
    def __init__(self, campaigns: CampaignLookup, flags: CancelFlags, *,
                 refresh_s: float = REFRESH_S, clock: Callable[[], float] = time.monotonic
                 ) -> None:
        self._campaigns = campaigns
        self._flags = flags
        self._refresh_s = refresh_s
        self._clock = clock
        self._known: OrderedDict[str, _Known] = OrderedDict()
        self._on_decision: OnDecision = lambda _campaign_id, _decision: None

    def on_decision(self, callback: OnDecision) -> None:
        """Call ``callback`` once with each stopping decision this pod learns of."""
        self._on_decision = callback

    # --- memory only ----------------------------------------------------------------------------
    def event(self, campaign_id: str) -> asyncio.Event:
        """Set while ``campaign_id`` may not send here (held or stopped)."""
        return self._entry(campaign_id).event

    def known(self, campaign_id: str) -> Verdict | None:
        """What this pod knows, without I/O (None: nothing yet)."""
        known = self._known.get(campaign_id)
        return None if known is None else known.verdict

    def stop_here(self, campaign_id: str) -> None:
        """Stop sending ``campaign_id`` in this pod now, before any decision (FCM refused it);
        the decision, once made, is learned and acknowledged like any other."""
        self._set(self._entry(campaign_id), Verdict.STOP)

    # --- the question ---------------------------------------------------------------------------
    async def verdict(self, campaign_id: str) -> Verdict:
        """May ``campaign_id`` send now? From memory while it is fresh, else from the store;
        while it sends, its cancel flag is read at most once a second."""
        known = self._known.get(campaign_id)
        if known is not None and known.verdict is Verdict.STOP:
            return Verdict.STOP
        now = self._clock()
        limit = HOLD_REFRESH_S if known is not None and known.verdict is Verdict.HOLD \
            else self._refresh_s
        if known is None or now - known.read_at >= limit:
            await self.read(campaign_id)
            known = self._entry(campaign_id)
        else:
            self._known.move_to_end(campaign_id)
        return await self._flag_checked(campaign_id, known, now)

    async def read(self, campaign_id: str) -> Verdict:
        """The verdict read from the store now (a campaign that does not exist: stop)."""
        campaign = await self._campaigns.get(campaign_id)
        if campaign is None:
            known = self._entry(campaign_id)
            self._set(known, Verdict.STOP)
            return Verdict.STOP
        return self.learn(campaign)

    async def _flag_checked(self, campaign_id: str, known: _Known, now: float) -> Verdict:
        if known.verdict is not Verdict.SEND or now - known.flag_read_at < FLAG_REFRESH_S:
            return known.verdict
        known.flag_read_at = now
        if await self._flags.is_raised(campaign_id):
            self._set(known, Verdict.STOP)
            await self.read(campaign_id)  # the decision, to acknowledge it
            return Verdict.STOP
        return known.verdict

    # --- what the pod learns --------------------------------------------------------------------
    def learn(self, campaign: Campaign) -> Verdict:
        """What the campaign as just read from the store says; a stopping decision is passed
        on once."""
        known = self._entry(campaign.id)
        known.read_at = self._clock()
        decision = campaign.decision
        known.latest = decision.id if decision is not None else None
        return self._apply(campaign.id, known, verdict_for(campaign.status), decision)

    async def hear(self, campaign_id: str, kind: DecisionKind, decision_id: str | None = None,
                   replaces: str | None = None) -> Verdict:
        """A broadcast told of decision ``decision_id``, which replaced ``replaces``: a cancel
        or a stop applies at once (nothing undoes them); a pause or a resume at once when it
        replaced the latest decision this pod knows (so it is newer than anything here), else
        it is read from the store, where the latest decision is."""
        known = self._known.get(campaign_id)
        if kind in (DecisionKind.CANCEL, DecisionKind.STOP):
            self._set(self._entry(campaign_id), Verdict.STOP)
        elif known is not None and decision_id is not None and known.latest == replaces:
            known.latest = decision_id
            verdict = Verdict.HOLD if kind is DecisionKind.PAUSE else Verdict.SEND
            return self._apply(campaign_id, known, verdict,
                               Decision(id=decision_id, kind=kind, at=utcnow()))
        return await self.read(campaign_id)

    def _apply(self, campaign_id: str, known: _Known, verdict: Verdict,
               decision: Decision | None) -> Verdict:
        """Take ``verdict`` (a stop stays), and pass a stopping decision on once."""
        if known.verdict is not Verdict.STOP:
            self._set(known, verdict)
        if (decision is not None and decision.kind.stops_pods and verdict is not Verdict.SEND
                and decision.id not in known.decisions):
            known.decisions.add(decision.id)
            self._on_decision(campaign_id, decision)
        return known.verdict

    # --- state ----------------------------------------------------------------------------------
    def _entry(self, campaign_id: str) -> _Known:
        known = self._known.get(campaign_id)
        if known is None:
            known = self._known[campaign_id] = _Known(Verdict.SEND, -float("inf"),
                                                      -float("inf"))
            if len(self._known) > REMEMBERED:
                self._known.popitem(last=False)
        else:
            self._known.move_to_end(campaign_id)
        return known

    @staticmethod
    def _set(known: _Known, verdict: Verdict) -> None:
        known.verdict = verdict
        if verdict is Verdict.SEND:
            known.event.clear()
        else:
            known.event.set()
