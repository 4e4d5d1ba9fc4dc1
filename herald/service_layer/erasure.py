"""A person leaves (issue 33): their devices are removed, and every record that lists them
recipient by recipient forgets them, while every campaign's numbers stay exact.

What is erased: the person's devices (every device registered with their user id, retired ones
too); in every chunk of every campaign, each recipient with one of those devices' tokens or
with the user id is replaced by the erased placeholder (no token, no user id, no profile:
``Recipient.erased_placeholder``), in the place it had; in every test send, each outcome of
one of those devices or with the user id loses its device id, token suffix and user id.
Deliveries name recipients by position only and keep them; what the frequency cap counted for
them (under a digest of their user id or tokens) is deleted. When some campaign is archived,
the person is queued until every archive is rewritten without them (``archive_erasure.py``).
A recount (``final_counts``) reads positions and chunk sizes, so it finds the same numbers;
the audit and every follow-up (retarget, amend, correct, retry) skip the placeholders, so
nobody erased is listed or sent to again.

A chunk already published still carries the tokens in its RabbitMQ message until a sender
takes it. A sender that claims a chunk with erased recipients reads its recipients from the
store instead of the message, and records each placeholder as failed (``HERALD_ERASED``)
without sending: a live erasure completes when each of the person's pending chunks is next
delivered (within a chunk's time budget for a chunk being sent at that moment).

The order makes a repeated call finish an interrupted one: the records first, the devices last
(while they exist, their tokens are what finds the person's records). The records are then
erased once more, with the tokens read at the start: a dispatcher paging the campaign read the
devices before they went may have written a chunk with them after the first pass.
"""

from __future__ import annotations

from dataclasses import dataclass

from herald.clock import utcnow
from herald.domain.erasure import ErasedPerson
from herald.domain.frequency_cap import person_of as cap_person
from herald.service_layer.ports import (
    ArchivedErasures,
    ChunkRepository,
    DeviceRepository,
    FrequencyCaps,
    TestSendRepository,
)


@dataclass(frozen=True, slots=True)
class Erasure:
    """What one erasure changed, in numbers only (all the operator log keeps of it)."""

    devices: int
    recipients: int
    """Recipients of chunks replaced by the erased placeholder."""
    test_outcomes: int
    archives_pending: bool = False
    """Campaigns archived before now may list the person: their files are rewritten without
    them by the api's background loop (``archive_erasure.py``)."""

    def summary(self) -> str:
        return (f"devices={self.devices} chunk_recipients={self.recipients} "
                f"test_send_outcomes={self.test_outcomes} "
                f"archives={'pending' if self.archives_pending else 'none'}")


async def erase_user(devices: DeviceRepository, chunks: ChunkRepository,
                     test_sends: TestSendRepository, user_id: str,
                     caps: FrequencyCaps | None = None,
                     archives: ArchivedErasures | None = None) -> Erasure:
    """Erase the person ``user_id``: their records first, their devices last. Idempotent: a
    second call finds nothing more and answers zeros (and queues the rewrite of archives
    again, which finds nothing more to rewrite)."""
    person = await person_of(devices, user_id)
    pending = archives is not None and await archives.queue(person, utcnow())
    recipients = await chunks.erase(person)
    test_outcomes = await test_sends.erase(person)
    if caps is not None:  # counted as the user, or as a device before it had a user id
        await caps.forget([cap_person(user_id, ""),
                           *(cap_person(None, token) for token in sorted(person.tokens))])
    removed = await devices.delete_of_user(user_id)
    recipients += await chunks.erase(person)  # a chunk paged from the devices meanwhile
    return Erasure(removed, recipients, test_outcomes, pending)


async def person_of(devices: DeviceRepository, user_id: str) -> ErasedPerson:
    """``user_id`` and the tokens and ids of every device registered with it."""
    theirs = await devices.of_user(user_id)
    return ErasedPerson(user_id, tokens=frozenset(d.token for d in theirs),
                        device_ids=frozenset(d.id for d in theirs))


async def unregister_device(devices: DeviceRepository, token: str) -> bool:
    """Remove one device (the app uninstalled, the user signed out): no audience selects it
    again. The records of campaigns that reached it keep it: a device leaving is not a person
    leaving (``erase_user`` is). False if no device had ``token``."""
    return await devices.delete_by_token(token)
