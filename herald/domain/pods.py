"""A pod's heartbeat: what every running Herald process says about itself, every few seconds."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class PodBeat:
    """What a pod says about itself every heartbeat."""

    id: str
    service: str
    host: str
    pid: int
    version: str
    started_at: float
    beat_at: float = 0.0
    metrics_port: int | None = None
    campaigns: list[str] = field(default_factory=list)
    """Campaigns this pod is working on right now."""

    def seen_idle(self, campaign_id: str, after_s: float) -> bool:
        """A heartbeat written after ``after_s`` (epoch seconds) shows the pod is not working on
        the campaign."""
        return self.beat_at > after_s and campaign_id not in self.campaigns
