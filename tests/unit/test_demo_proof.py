"""The demo's proof from the FCM emulator's record holds on a correct record and fails on each
way a correction can go wrong (the e2e test shows it holding on a real one)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from devstack.demo import AuditSets, Proof, StoryFailed, expected_replacement, prove_correction
from fcm_emulator.client import Received

KEY = "herald-6b0496de6f99b0295842196a"
AUDIT = AuditSets(sent=frozenset({"s1", "s2"}), failed=frozenset({"dead-1"}),
                  unsent=frozenset({"u1", "u2", "dead-2"}))


def _request(token: str, at: float, key: str = KEY, error: str | None = None) -> Received:
    tag, collapse, apns, topic, web_tag = expected_replacement(key)
    return Received(at, token, error, android_tag=tag, android_collapse_key=collapse,
                    apns_collapse_id=apns, webpush_topic=topic, webpush_tag=web_tag)


ORIGINAL = [_request("s1", 1), _request("s2", 1), _request("dead-1", 1, error="UNREGISTERED")]
CORRECTIONS = [_request("s1", 2), _request("u1", 2), _request("s2", 2), _request("u2", 2),
               _request("dead-2", 2, error="UNREGISTERED")]


def _prove(corrections: list[Received]) -> Proof:
    return prove_correction(ORIGINAL, corrections, AUDIT, KEY, KEY)


def test_a_correct_record_is_counted_device_by_device() -> None:
    proof = _prove(CORRECTIONS)
    assert proof == Proof(replaced=2, new=2, dead_unsent=1, dead_original=1)


@pytest.mark.parametrize(("corrections", "failure"), [
    ([*CORRECTIONS, _request("u1", 3)], "two corrections"),
    (CORRECTIONS[1:], "got no correction"),
    ([*CORRECTIONS, _request("dead-1", 3)], "not to get one"),
    ([_request("s1", 2, key="herald-other"), *CORRECTIONS[1:]], "tag/collapse id"),
    ([replace(CORRECTIONS[0], webpush_topic=None), *CORRECTIONS[1:]], "tag/collapse id"),
    ([*CORRECTIONS[:3], _request("u2", 2, key="herald-other"), CORRECTIONS[4]], "key"),
    ([replace(CORRECTIONS[0], error="UNAVAILABLE"), *CORRECTIONS[1:]], "refused"),
])
def test_each_way_a_correction_goes_wrong_fails_the_proof(corrections: list[Received],
                                                          failure: str) -> None:
    with pytest.raises(StoryFailed, match=failure):
        _prove(corrections)
