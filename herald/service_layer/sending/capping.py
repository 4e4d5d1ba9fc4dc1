"""The frequency cap at send time: one check per chunk delivery, right before its requests, and
one release after them (``domain/frequency_cap.py``; the store: ``adapters/frequency_caps.py``).

Before a delivery sends, the recipients it is about to send to are checked at once, grouped by
person: those of a person the cap holds back are recorded ``suppressed`` (rule
``frequency_cap``) and never sent; the others count from that moment. Once the window has
sent the delivery, the sends that did not reach FCM are released: a request FCM refused, and
one that never left (a cancel, a pause, the chunk's time budget, a fence). A person FCM never
reached so is not held back later by them, for one more Redis call per delivery. What FCM may
have delivered keeps counting: sent, and a request without an answer in time (``TIMEOUT``).

Choices written down (docs/sending-safely.md#frequency-cap):
- A send counts while it is on the wire: a person checked for another campaign meanwhile is
  held back even if this request then fails. The cap errs towards fewer pushes, never more.
- A sender killed between the check and the release leaves its sends counted until the
  longest window ends; the redelivered chunk finds them counted for its own campaign and is
  admitted, never suppressed by itself.
- A delivery that fails (an outage, a write that did not land) releases nothing: what it
  started may have been delivered.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from herald.domain.fcm_errors import FcmError
from herald.domain.frequency_cap import Cap, CapRule, person_of, rule_for, send_key
from herald.domain.messages import SendChunk
from herald.domain.outcomes import RecipientOutcome, Target
from herald.domain.purpose import Purpose
from herald.domain.suppression import Rule, suppressed_code
from herald.service_layer.ports import FrequencyCaps

CAPPED = suppressed_code(Rule.FREQUENCY_CAP)


@dataclass
class Screened:
    """One delivery's recipients after the cap: those to send, those it suppressed, and the
    sends it counted (person → (position, send key)) until they are kept or released."""

    admitted: list[Target]
    suppressed: list[RecipientOutcome] = field(default_factory=list)
    counted: dict[str, list[tuple[int, str]]] = field(default_factory=dict)
    kept: set[int] = field(default_factory=set)
    """Positions FCM may have delivered to (sent, or no answer in time)."""

    def answered(self, outcomes: list[RecipientOutcome]) -> None:
        for outcome in outcomes:
            if outcome.error is None or outcome.error == FcmError.TIMEOUT:
                self.kept.add(outcome.position)

    def not_delivered(self) -> dict[str, list[str]]:
        """The counted sends FCM did not deliver, by person."""
        released = {person: [key for position, key in sends if position not in self.kept]
                    for person, sends in self.counted.items()}
        return {person: keys for person, keys in released.items() if keys}


class Capping:
    """The cap in force (``HERALD_MARKETING_CAP``; None: none) and where it is counted (None:
    nowhere, nothing is capped)."""

    def __init__(self, caps: FrequencyCaps | None, setting: Cap | None) -> None:
        self._caps = caps
        self._setting = setting

    def rule(self, purpose: Purpose | None, choice: str | None) -> CapRule | None:
        """What the cap does with a campaign's sends (None: nothing)."""
        return None if self._caps is None else rule_for(purpose, choice, self._setting)

    async def screen(self, chunk: SendChunk, rule: CapRule | None,
                     todo: list[Target]) -> Screened:
        """``todo`` split into the recipients to send (their sends counted) and those the cap
        suppresses, in one atomic check of their people."""
        if rule is None or self._caps is None or not todo:
            return Screened(todo)
        counted: dict[str, list[tuple[int, str]]] = {}
        for target in todo:
            recipient = chunk.recipients[target.position]
            counted.setdefault(person_of(recipient.user_id, recipient.token), []).append(
                (target.position, send_key(chunk.campaign_id, chunk.seq, target.position)))
        admitted = await self._caps.admit(
            chunk.campaign_id, rule,
            {person: [key for _, key in sends] for person, sends in counted.items()})
        held = {position for person, sends in counted.items() if person not in admitted
                for position, _ in sends}
        return Screened(
            admitted=[t for t in todo if t.position not in held],
            suppressed=[RecipientOutcome(t, CAPPED) for t in todo if t.position in held],
            counted={person: sends for person, sends in counted.items() if person in admitted})

    async def release(self, screened: Screened) -> None:
        """Count no more the sends of ``screened`` that FCM did not deliver."""
        if self._caps is not None and screened.counted:
            await self._caps.release(screened.not_delivered())
