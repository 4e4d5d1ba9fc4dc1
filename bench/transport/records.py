"""What crosses between the bench and a row's process (both picklable): the ``Plan`` a row runs
and the ``Measurement`` it sends back, with what the measurement means (rates, shares, whether
other work disturbed it)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

DISTURBED_SHARE = 0.10
"""Other work on a pinned CPU above this share of the window makes a row's msg/s suspect..."""
SATURATED_SHARE = 0.95
"""...unless it is only the emulator's CPU and the row kept its own CPU this busy: then the row was
bound by its own work and a slower emulator did not hold it back."""


class BenchError(RuntimeError):
    """A row could not be measured honestly; no number is printed for it."""


@dataclass(frozen=True)
class Plan:
    """Everything a row's process needs (picklable: it crosses to a spawned process)."""

    row: str
    endpoint: str
    seconds: float
    warmup_s: float
    concurrency: int
    redis_url: str
    emulator_pid: int
    cpu: int | None
    emulator_cpu: int | None
    profile_to: str | None = None


@dataclass(frozen=True)
class Measurement:
    """One timed window of one row, as the row's process saw it (picklable, back to the parent)."""

    row: str
    loop: str
    in_flight: str
    messages: int
    seconds: float
    cpu_s: float
    emulator_cpu_s: float
    others_cpu_s: tuple[float, float] | None
    """CPU the two pinned CPUs spent on anything but the row and the emulator (other processes;
    kernel work not charged to either): a throughput is only trustworthy when this is small."""
    requests_sent: int
    """Warm-up included: what the emulator must have counted."""

    @property
    def per_s(self) -> float:
        return self.messages / self.seconds

    @property
    def cpu_s_per_1k(self) -> float:
        return 1000 * self.cpu_s / self.messages

    @property
    def others_share(self) -> tuple[float, float] | None:
        if self.others_cpu_s is None:
            return None
        client, emulator = self.others_cpu_s
        return round(client / self.seconds, 3), round(emulator / self.seconds, 3)

    @property
    def disturbed(self) -> bool:
        """Other work took a real share of the row's CPU, or of the emulator's CPU while the row
        was not bound by its own CPU (so it may have been waiting on a starved emulator): this
        run's msg/s understates the transport."""
        if self.others_cpu_s is None:
            return False
        client, emulator = (seconds / self.seconds for seconds in self.others_cpu_s)
        row_bound = self.cpu_s / self.seconds > SATURATED_SHARE
        return client > DISTURBED_SHARE or (emulator > DISTURBED_SHARE and not row_bound)

    def as_dict(self, baseline: Measurement | None) -> dict[str, Any]:
        rounded = {key: round(value, 6) if isinstance(value, float) else value
                   for key, value in asdict(self).items()}
        if self.others_cpu_s is not None:
            rounded["others_cpu_s"] = [round(seconds, 6) for seconds in self.others_cpu_s]
        return {**rounded, "messages_per_s": round(self.per_s, 1),
                "cpu_s_per_1k_messages": round(self.cpu_s_per_1k, 4),
                "client_cpu_share": round(self.cpu_s / self.seconds, 3),
                "emulator_cpu_share": round(self.emulator_cpu_s / self.seconds, 3),
                "others_cpu_share": self.others_share, "disturbed": self.disturbed,
                "ratio_to_baseline": round(self.per_s / baseline.per_s, 2) if baseline else None}


Runs = dict[str, list[Measurement]]
"""Every measurement of each row, in the order taken."""
