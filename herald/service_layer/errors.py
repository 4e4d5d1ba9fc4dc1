"""Errors every use case may raise about what it was asked for."""

from __future__ import annotations


class CampaignNotFound(LookupError):
    def __init__(self, campaign_id: str) -> None:
        super().__init__(f"no campaign {campaign_id}")
        self.campaign_id = campaign_id
