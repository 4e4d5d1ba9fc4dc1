"""Bodies checked off the event loop (``services/api/bodies.py``): which texts an edit or a
follow-up checks ahead, and that checking ahead is bounded by what a valid content can hold."""

from __future__ import annotations

import threading

import pytest

from herald.contracts.http import CampaignPatch
from herald.domain.documents import CampaignContent
from herald.domain.rendering import Translation
from services.api import bodies
from services.api.bodies import AHEAD_PLACEHOLDERS, BodyChecks, texts_of


def test_the_texts_of_a_content_and_of_a_request_that_changes_it() -> None:
    stored = CampaignContent(title="T", body="B", data={"landingUrl": "L"},
                             translations={"es": Translation(title="t", body="b",
                                                             data={"landingUrl": "l"})})
    assert list(texts_of(stored)) == ["T", "B", "L", "t", "b", "l"]
    assert list(texts_of(CampaignPatch(body="new"))) == ["new"]
    assert list(texts_of(None)) == []


async def test_checking_ahead_stops_where_no_valid_content_could_still_be(
        monkeypatch: pytest.MonkeyPatch) -> None:
    checked: list[str] = []
    threads: set[str] = set()

    def counted(field: str, text: str) -> list[object]:
        checked.append(text)
        threads.add(threading.current_thread().name)
        return []

    monkeypatch.setattr(bodies, "check_text", counted)
    text = "{{ platform }}" * 50
    many = CampaignContent(title=text, body=text, data={f"k{i}": text for i in range(100)})
    await BodyChecks().templates_ahead(*[many] * 3)
    assert len(checked) * 50 == AHEAD_PLACEHOLDERS == 2 * 101 * 50
    assert threading.main_thread().name not in threads
