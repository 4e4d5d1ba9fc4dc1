"""A device import read as NDJSON and counted line by line (issue 33, point 5):
``herald/contracts/device_lines.py``, ``herald/domain/device_import.py``,
``herald/service_layer/device_import.py`` on the in-memory registry."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable
from typing import Any

import orjson
import pytest
from prometheus_client import REGISTRY

from herald.contracts.device_lines import (
    MAX_LINE_BYTES,
    DeviceLine,
    LineSplitter,
    device_lines,
    parse_device_line,
)
from herald.contracts.http import DeviceIn
from herald.domain.device_import import (
    MAX_REPORTED_PROBLEMS,
    ImportCounts,
    ImportReport,
    LineProblem,
    plan_batch,
    same_fields,
)
from herald.domain.types import (
    MAX_ATTRIBUTE_TEXT_CHARS,
    MAX_TOKEN_CHARS,
    MAX_TOPIC_CHARS,
    MAX_USER_ID_CHARS,
)
from herald.service_layer.device_import import import_devices
from herald.service_layer.ports import Stores


def _device(i: int, **fields: Any) -> dict[str, Any]:
    return DeviceIn.model_validate({"token": f"tok-{i}", "platform": "android", **fields}
                                   ).model_dump(mode="json")


def _ndjson(*devices: dict[str, Any]) -> bytes:
    return b"".join(orjson.dumps(device) + b"\n" for device in devices)


async def _chunks(body: bytes, size: int) -> AsyncIterator[bytes]:
    for start in range(0, len(body), size):
        yield body[start:start + size]


async def _read(body: bytes, size: int = 7, max_line_bytes: int = MAX_LINE_BYTES
                ) -> list[DeviceLine | LineProblem]:
    return [line async for line in device_lines(_chunks(body, size), max_line_bytes)]


# --- splitting and parsing -------------------------------------------------------------------------
@pytest.mark.parametrize("size", [1, 3, 64, 1 << 20])
async def test_lines_are_numbered_as_an_editor_shows_them_however_the_body_is_cut(
        size: int) -> None:
    body = _ndjson(_device(1)) + b"\n  \r\n" + _ndjson(_device(2)).rstrip(b"\n") + b"\r\n" + \
        orjson.dumps(_device(3))  # no newline at the end
    read = await _read(body, size)
    assert [(line.line, line.fields["token"]) for line in read if isinstance(line, DeviceLine)
            ] == [(1, "tok-1"), (4, "tok-2"), (5, "tok-3")]
    assert not [line for line in read if isinstance(line, LineProblem)]


async def test_invalid_lines_are_reported_by_number_and_the_rest_go_on() -> None:
    body = b"".join([
        _ndjson(_device(1)),
        b'{"token": "tok-2", "platform": "blackberry"}\n',
        b"not json at all\n",
        b'{"token": "tok-4", "platform": "ios", "colour": "red"}\n',
        b'[{"token": "tok-5", "platform": "ios"}]\n',
        _ndjson(_device(6)),
    ])
    read = await _read(body)
    problems = {line.line: line for line in read if isinstance(line, LineProblem)}
    assert [line.line for line in read if isinstance(line, DeviceLine)] == [1, 6]
    assert sorted(problems) == [2, 3, 4, 5]
    assert {problem.code for problem in problems.values()} == {"invalid_device"}
    assert problems[2].message.startswith("platform: Input should be 'android', 'ios' or 'web'")
    assert problems[3].message.startswith("Invalid JSON")
    assert problems[4].message == "colour: Extra inputs are not permitted"
    assert "object" in problems[5].message


def test_a_line_is_validated_as_an_item_of_the_bulk_route() -> None:
    fields = {"token": "tok-1", "platform": "ios", "locale": "pt_BR", "topics": ["news"],
              "attributes": {"plan": "gold", "age": 41, "score": 1.5, "beta": True}}
    parsed = parse_device_line(9, orjson.dumps(fields))
    assert parsed == DeviceLine(9, DeviceIn.model_validate(fields).model_dump(mode="json"))
    assert isinstance(parse_device_line(1, b'{"token": "a b", "platform": "ios"}'), LineProblem)
    assert isinstance(parse_device_line(1, orjson.dumps(
        {"token": "t", "platform": "ios", "timezone": "Mars/Olympus"})), LineProblem)


@pytest.mark.parametrize("size", [5, 4096])
async def test_a_line_too_long_is_refused_by_number_without_being_kept(size: int) -> None:
    long = b'{"token": "' + b"x" * 300 + b'", "platform": "ios"}'
    body = _ndjson(_device(1)) + long + b"\n" + _ndjson(_device(3)) + long
    read = await _read(body, size, max_line_bytes=200)
    assert [(line.line, line.code) for line in read if isinstance(line, LineProblem)] == [
        (2, "line_too_long"), (4, "line_too_long")]
    assert [line.line for line in read if isinstance(line, DeviceLine)] == [1, 3]
    problem = next(line for line in read if isinstance(line, LineProblem))
    assert problem.message.startswith(f"{len(long):,} bytes, over the 200")


def test_the_splitter_never_holds_more_than_a_line() -> None:
    splitter = LineSplitter(max_line_bytes=100)
    for _ in range(1000):
        assert splitter.feed(b"y" * 1000) == []
        assert len(splitter._pending) <= 100
    assert splitter.feed(b"\n") == [(1, None, 1_000_000)]


def test_the_largest_valid_device_fits_on_a_line() -> None:
    largest = {"token": "t" * MAX_TOKEN_CHARS, "user_id": "u" * MAX_USER_ID_CHARS,
               "platform": "android", "topics": ["t" * MAX_TOPIC_CHARS] * 100,
               "locale": "zh_Hant_TW", "timezone": "America/Argentina/ComodRivadavia",
               "attributes": {f"a{i}": "\\" * MAX_ATTRIBUTE_TEXT_CHARS for i in range(50)}}
    line = orjson.dumps(largest)
    assert isinstance(parse_device_line(1, line), DeviceLine)
    assert len(line) < MAX_LINE_BYTES


# --- counting --------------------------------------------------------------------------------------
def test_a_batch_inserts_new_tokens_updates_changed_ones_and_leaves_the_rest() -> None:
    stored = {"tok-2": _device(2), "tok-3": _device(3, locale="en")}
    plan = plan_batch([_device(1), _device(2), _device(3, locale="ko")], stored)
    assert plan.counts == ImportCounts(inserted=1, updated=1, unchanged=1)
    assert plan.inserts == {"tok-1": _device(1)}
    assert plan.updates == {"tok-3": _device(3, locale="ko")}


def test_a_repeated_token_counts_each_line_against_the_one_before_and_stores_the_last() -> None:
    lines = [_device(1, locale="en"), _device(1, locale="en"), _device(1, locale="ko"),
             _device(2), _device(2, locale="fr"), _device(2)]
    plan = plan_batch(lines, {"tok-2": _device(2)})
    assert plan.counts == ImportCounts(inserted=1, unchanged=2, updated=3)
    assert plan.inserts == {"tok-1": _device(1, locale="ko")}
    assert plan.updates == {}  # tok-2 ends as it was stored: nothing to write


def test_the_same_batch_again_changes_nothing_and_says_so() -> None:
    lines = [_device(i, attributes={"n": i, "ratio": i / 2, "vip": i % 2 == 0})
             for i in range(5)]
    first = plan_batch(lines, {})
    again = plan_batch(lines, first.inserts)
    assert first.counts == ImportCounts(inserted=5)
    assert again.counts == ImportCounts(unchanged=5)
    assert (again.inserts, again.updates) == ({}, {})


@pytest.mark.parametrize(("stored", "new"), [
    ({"vip": 1}, {"vip": True}), ({"n": 1}, {"n": 1.0}), ({"n": 1}, {"n": 1, "m": 2})])
def test_a_value_of_another_type_is_a_change(stored: dict[str, Any], new: dict[str, Any]) -> None:
    assert not same_fields(_device(1, attributes=stored), _device(1, attributes=new))


def test_a_field_missing_from_the_stored_device_is_compared_as_none() -> None:
    stored = {key: value for key, value in _device(1).items() if key != "locale"}
    assert same_fields(stored, _device(1))
    assert not same_fields(stored, _device(1, locale="en"))


def test_problems_beyond_the_listed_ones_are_counted_not_listed() -> None:
    report = ImportReport()
    for line in range(MAX_REPORTED_PROBLEMS + 5):
        report.refuse(LineProblem(line + 1, "invalid_device", "nope"))
    assert report.counts.invalid == MAX_REPORTED_PROBLEMS + 5
    assert len(report.problems) == MAX_REPORTED_PROBLEMS
    assert report.problems_omitted == 5


# --- the use case on the in-memory registry --------------------------------------------------------
async def _lines(items: Iterable[DeviceLine | LineProblem]) -> AsyncIterator[DeviceLine | LineProblem]:
    for item in items:
        yield item


async def test_an_import_twice_inserts_once_then_reports_every_line_unchanged(
        stores: Stores) -> None:
    lines = [DeviceLine(i + 1, _device(i)) for i in range(23)]
    lines.insert(5, LineProblem(6, "invalid_device", "platform: bad"))
    first = await import_devices(stores.devices, _lines(lines), batch_size=4)
    second = await import_devices(stores.devices, _lines(lines), batch_size=4)
    assert first.counts == ImportCounts(inserted=23, invalid=1)
    assert second.counts == ImportCounts(unchanged=23, invalid=1)
    assert [problem.line for problem in second.problems] == [6]
    stored = await stores.devices.find_by_token("tok-22")
    assert stored is not None and stored.platform == "android"


async def test_changed_lines_are_written_and_counted_as_updated(stores: Stores) -> None:
    await import_devices(stores.devices, _lines(DeviceLine(i, _device(i)) for i in range(10)),
                         batch_size=3)
    changed = [DeviceLine(i, _device(i, locale="es" if i % 2 else None)) for i in range(12)]
    report = await import_devices(stores.devices, _lines(changed), batch_size=3)
    assert report.counts == ImportCounts(inserted=2, updated=5, unchanged=5)
    stored = await stores.devices.find_by_token("tok-3")
    assert stored is not None and stored.locale == "es"


async def test_a_read_that_fails_ends_the_import_after_the_batch_in_flight(
        stores: Stores) -> None:
    async def broken() -> AsyncIterator[DeviceLine | LineProblem]:
        for i in range(7):
            yield DeviceLine(i + 1, _device(i))
        raise ConnectionResetError("client went away")

    with pytest.raises(ConnectionResetError):
        await import_devices(stores.devices, broken(), batch_size=3)
    assert await stores.devices.find_by_token("tok-5") is not None  # the second batch, written
    assert await stores.devices.find_by_token("tok-6") is None  # never a whole batch


async def test_every_line_is_counted_in_the_metric_as_its_batch_is_written(
        stores: Stores) -> None:
    def imported() -> dict[str, float]:
        return {outcome: REGISTRY.get_sample_value("herald_devices_imported_total",
                                                    {"outcome": outcome}) or 0.0
                for outcome in ("inserted", "updated", "unchanged", "invalid")}

    before = imported()
    lines = [DeviceLine(i + 1, _device(i)) for i in range(7)]
    await import_devices(stores.devices, _lines(lines), batch_size=3)
    await import_devices(stores.devices, _lines(
        [*lines[:2], DeviceLine(3, _device(2, locale="fr")), LineProblem(4, "invalid_device", "x")]),
        batch_size=3)
    after = imported()
    assert {outcome: after[outcome] - before[outcome] for outcome in after} == {
        "inserted": 7, "updated": 1, "unchanged": 2, "invalid": 1}
