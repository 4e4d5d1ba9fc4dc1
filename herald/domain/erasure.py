"""A person who leaves: whose entries an erasure replaces in the records that list people one
by one (``herald/service_layer/erasure.py`` says what is erased and what stays)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ErasedPerson:
    """A user id and the devices they had: an entry of any record that names one of these
    tokens, device ids or the user id is theirs."""

    user_id: str | None
    tokens: frozenset[str] = frozenset()
    device_ids: frozenset[str] = frozenset()

    def owns(self, entry: Mapping[str, object]) -> bool:
        """Whether a stored entry (a chunk's recipient, a test send's outcome) is theirs."""
        if self.user_id is not None and entry.get("user_id") == self.user_id:
            return True
        return entry.get("token") in self.tokens or entry.get("device_id") in self.device_ids
