"""People erased after an archive that lists them was written (issue 33, point 4): their lines
in past archives replaced by the erased placeholder, each file rewritten, checked and recorded.

``DELETE /v1/users/{id}`` queues the person (their user id and tokens, kept only until this is
done) when some campaign is archived. The api's background loop (beside ``archiving.py``, every
``HERALD_RETENTION_INTERVAL_S``) takes the people queued and passes every archive once for all
of them: a file whose text names none of them (a byte search of the decompressed NDJSON) is
left alone; one that does is rewritten under the same name, each of their lines replaced by the
placeholder an archive written after the erasure holds (same outcome, same place, nothing of
theirs), read back and checked by SHA-256 and line count, then the campaign's record
(checksum, size, ``rewritten_at``) and per-variant summary (their lines move to ``erased``)
updated. The people are forgotten once a pass reached every archive; a file another replica
held, or one that did not check out, leaves them queued for the next run (a file already
without them is left alone, so passing it again changes nothing).
"""

from __future__ import annotations

import asyncio
import logging
import zlib
from collections.abc import AsyncIterator
from dataclasses import replace
from datetime import datetime

import orjson

from herald.domain.archive import archive_name
from herald.domain.documents import Campaign, Outcome
from herald.domain.erasure import ErasedPerson
from herald.domain.suppression import Rule
from herald.observability import ARCHIVE_FAILURES, ARCHIVES_REWRITTEN
from herald.service_layer.archiving import (
    GZIP_WBITS,
    ArchivePass,
    ArchivePolicy,
    ArchiveRefused,
    Written,
    compressed,
    variant_counts,
)
from herald.service_layer.ports import ArchivedErasures, ArchiveTarget
from herald.service_layer.recipients import RecipientLine

log = logging.getLogger(__name__)

PEOPLE_PER_PASS = 1000
"""People a pass rewrites the archives for at once (the rest wait for the next pass)."""
CAMPAIGNS_PER_PAGE = 100


def mentions(text: bytes, people: tuple[ErasedPerson, ...]) -> bool:
    """Whether NDJSON text as the archive writes it (orjson: ``"user_id":"u3"``) may hold a
    line of ``people``. It may say yes for a line that is not theirs (a token equal to another
    line's error text); ``ErasedPerson.owns`` decides line by line."""
    return any(needle in text for needle in _needles(people))


def _needles(people: tuple[ErasedPerson, ...]) -> list[bytes]:
    found = [b'"user_id":' + orjson.dumps(p.user_id) for p in people if p.user_id is not None]
    return found + [b'"token":' + orjson.dumps(token) for p in people for token in p.tokens]


def line_of(stored: dict[str, object]) -> RecipientLine:
    """An archive line read back as the audit line it was written from."""
    outcome, error = Outcome(str(stored["outcome"])), stored.get("error")
    error = None if error is None else str(error)
    if stored.get("erased"):
        return RecipientLine("", None, outcome, error, erased=True)
    rule = stored.get("rule")
    return RecipientLine(str(stored["token"]), None if stored.get("user_id") is None
                         else str(stored["user_id"]), outcome, error, str(stored["variant"]),
                         rule=None if rule is None else Rule(str(rule)))


def without(line: RecipientLine, people: tuple[ErasedPerson, ...]) -> RecipientLine:
    """``line``, or the erased placeholder in its place if it is one of ``people``'s."""
    entry = {"user_id": line.user_id, "token": line.token}
    if line.erased or not any(person.owns(entry) for person in people):
        return line
    return RecipientLine("", None, line.outcome, line.error, erased=True)


async def text_of(blocks: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    """A gzip file's blocks decompressed, cut at line ends (each piece whole lines)."""
    inflater = zlib.decompressobj(GZIP_WBITS)
    rest = b""
    async for block in blocks:
        text = rest + await asyncio.to_thread(inflater.decompress, block)
        cut = text.rfind(b"\n") + 1
        rest = text[cut:]
        if cut:
            yield text[:cut]
    rest += inflater.flush()
    if rest:
        yield rest


class ArchiveEraser(ArchivePass):
    """Rewrites archives without the people erased after they were written."""

    def __init__(self, erasures: ArchivedErasures, target: ArchiveTarget | None, pod_id: str,
                 policy: ArchivePolicy) -> None:
        super().__init__(target, pod_id, policy)
        self._erasures = erasures

    async def run(self, now: datetime) -> list[Campaign]:
        """One pass for the people queued now: the campaigns whose archive this pod rewrote."""
        queued = await self._erasures.waiting(PEOPLE_PER_PASS) if self._target else []
        if not queued or self._target is None:
            return []
        people = tuple(person for _, person in queued)
        rewritten: list[Campaign] = []
        reached_all, after = True, None
        while page := await self._erasures.archived(after, CAMPAIGNS_PER_PAGE):
            for campaign in page:
                if not await self._names_them(self._target, campaign, people):
                    continue
                done = await self._rewrite(self._target, campaign, people, now)
                reached_all = reached_all and done is not None
                rewritten += [done] if done is not None else []
            after = page[-1].id
        if reached_all:
            await self._erasures.done([entry_id for entry_id, _ in queued])
        log.info("archives rewritten without %d people erased since: %d (%s)", len(people),
                 len(rewritten), "done" if reached_all else "some are left for the next run")
        return rewritten

    @staticmethod
    async def _names_them(target: ArchiveTarget, campaign: Campaign,
                          people: tuple[ErasedPerson, ...]) -> bool:
        async for text in text_of(target.get(archive_name(campaign.id))):
            if mentions(text, people):
                return True
        return False

    async def _rewrite(self, target: ArchiveTarget, campaign: Campaign,
                       people: tuple[ErasedPerson, ...], now: datetime) -> Campaign | None:
        claimed = await self._erasures.claim_archived(campaign.id, self._pod_id, now,
                                                      now + self._policy.lease)
        if claimed is None or claimed.archive is None:
            return None  # another replica holds it: the people stay queued for the next run
        try:
            written = await self._write(target, claimed, people)
        except ArchiveRefused as refused:  # kept claimed until the lease ends, as an archive
            ARCHIVE_FAILURES.labels(refused.reason).inc()
            log.error("campaign %s: archive not rewritten: %s", campaign.id, refused)
            return None
        except BaseException:
            await asyncio.shield(self._erasures.release(campaign.id, self._pod_id))
            raise
        record = replace(claimed.archive, sha256=written.digest.hexdigest(),
                         bytes=written.size, rewritten_at=now)
        marked = await self._erasures.mark_rewritten(campaign.id, self._pod_id, record,
                                                     variant_counts(written.tally))
        if marked is not None:
            ARCHIVES_REWRITTEN.inc()
            log.info("campaign %s: archive %s rewritten (sha256 %s)", campaign.id,
                     record.location, record.sha256)
        return marked

    @staticmethod
    async def _write(target: ArchiveTarget, campaign: Campaign,
                     people: tuple[ErasedPerson, ...]) -> Written:
        assert campaign.archive is not None
        name, written = archive_name(campaign.id), Written()

        expected = campaign.archive.lines

        async def lines() -> AsyncIterator[RecipientLine]:
            count = 0
            async for text in text_of(target.get(name)):
                for raw in text.splitlines():
                    count += 1
                    yield without(line_of(orjson.loads(raw)), people)
            if count != expected:  # before the last block: the target keeps the file it had
                raise ArchiveRefused("count", f"{name} holds {count} lines, {expected} written")

        await target.put(name, compressed(lines(), written))
        stored = await target.sha256(name)
        if stored != written.digest.hexdigest():
            raise ArchiveRefused("checksum", f"{name} reads back as {stored}, written "
                                             f"{written.digest.hexdigest()}")
        return written
