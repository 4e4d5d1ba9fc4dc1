"""A device import, counted line by line: what each line did to the registry.

An import (``POST /v1/devices/import``, ``herald devices import``) sends one device per line,
and a file is often sent again (a retried upload, a nightly full export). Each line therefore
says what it changed: ``inserted`` (a token the registry did not have), ``updated`` (a known
token whose fields differ), ``unchanged`` (a known token with exactly these fields: nothing is
written), ``invalid`` (the line was refused, reported by number). Re-importing the same file
inserts and updates nothing, and its counts say so.

Lines are counted as if applied one after another: a token repeated in one import is inserted
by its first line, and its later lines compare with the line before them. What is written is
each token's last line (one write per token per batch), which is the state those steps end in.
No I/O here: the adapter reads what is stored and writes what :func:`plan_batch` says.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

DeviceFields = dict[str, Any]
"""A device as the app registers it (``DeviceIn``'s fields, JSON types), ``token`` included."""

MAX_REPORTED_PROBLEMS = 1_000
"""Invalid lines listed in an import's answer; every one is counted, the rest are not listed
(a file of a million wrong lines would otherwise answer with a million messages)."""


@dataclass(frozen=True, slots=True)
class LineProblem:
    """A line refused: its number (1-based, as an editor shows it), a code and what is wrong."""

    line: int
    code: str
    message: str


@dataclass(slots=True)
class ImportCounts:
    inserted: int = 0
    updated: int = 0
    unchanged: int = 0
    invalid: int = 0

    def add(self, other: ImportCounts) -> None:
        self.inserted += other.inserted
        self.updated += other.updated
        self.unchanged += other.unchanged
        self.invalid += other.invalid

    @property
    def lines(self) -> int:
        return self.inserted + self.updated + self.unchanged + self.invalid


@dataclass(slots=True)
class ImportReport:
    """What an import did: its counts, and its invalid lines (the first
    :data:`MAX_REPORTED_PROBLEMS`; ``problems_omitted`` more were counted, not listed)."""

    counts: ImportCounts = field(default_factory=ImportCounts)
    problems: list[LineProblem] = field(default_factory=list)
    problems_omitted: int = 0

    def refuse(self, problem: LineProblem) -> None:
        self.counts.invalid += 1
        if len(self.problems) < MAX_REPORTED_PROBLEMS:
            self.problems.append(problem)
        else:
            self.problems_omitted += 1


@dataclass(frozen=True, slots=True)
class BatchPlan:
    """The writes of one batch of lines and what the lines did: ``inserts`` and ``updates`` by
    token, each token's last line."""

    inserts: dict[str, DeviceFields]
    updates: dict[str, DeviceFields]
    counts: ImportCounts


def plan_batch(lines: Sequence[DeviceFields], stored: Mapping[str, DeviceFields]) -> BatchPlan:
    """The writes that bring the registry from ``stored`` (the known tokens among ``lines``,
    each with the fields a line can set) to the state after ``lines``, applied in order."""
    counts = ImportCounts()
    current: dict[str, DeviceFields | None] = {}
    for fields in lines:
        token = fields["token"]
        before = current[token] if token in current else stored.get(token)
        if before is None:
            counts.inserted += 1
        elif same_fields(before, fields):
            counts.unchanged += 1
        else:
            counts.updated += 1
        current[token] = fields
    inserts = {token: last for token, last in current.items()
               if last is not None and token not in stored}
    updates = {token: last for token, last in current.items()
               if last is not None and token in stored and not same_fields(stored[token], last)}
    return BatchPlan(inserts, updates, counts)


def same_fields(before: Mapping[str, Any], after: Mapping[str, Any]) -> bool:
    """Whether a stored device already has exactly ``after``'s fields (a field missing from
    what is stored counts as None). Types count: ``true`` is not ``1``, ``1`` is not ``1.0``,
    as MongoDB keeps them apart."""
    return all(_strictly_equal(before.get(name), value) for name, value in after.items())


def _strictly_equal(a: Any, b: Any) -> bool:
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_strictly_equal(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(_strictly_equal(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)
