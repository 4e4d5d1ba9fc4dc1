"""Errors every use case may raise about what it was asked for."""

from __future__ import annotations

from herald.domain.archive import ArchiveRecord


class CampaignNotFound(LookupError):
    def __init__(self, campaign_id: str) -> None:
        super().__init__(f"no campaign {campaign_id}")
        self.campaign_id = campaign_id


class CampaignArchived(LookupError):
    """The campaign's per-recipient records were archived and deleted (``archiving.py``): its
    audit is the archive's file, and nothing can follow it up recipient by recipient."""

    def __init__(self, campaign_id: str, archive: ArchiveRecord) -> None:
        super().__init__(f"campaign {campaign_id}'s recipients were archived at "
                         f"{archive.at.isoformat()} to {archive.location} "
                         f"(sha256 {archive.sha256})")
        self.campaign_id = campaign_id
        self.archive = archive
