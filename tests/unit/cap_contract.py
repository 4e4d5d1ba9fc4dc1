"""What every store of the frequency cap must do: the same assertions for the in-memory fake
(``tests/unit/test_frequency_cap.py``, deciding with the domain's ``admits``) and for the Redis
script (``tests/integration/test_frequency_cap.py``).

A subclass named ``Test...`` provides a ``caps`` fixture (an empty store) and inherits every
test. Instants are given (``now_s``), in whole seconds from an arbitrary origin: Redis keeps
milliseconds.
"""

from __future__ import annotations

from herald.domain.frequency_cap import CapRule, parse_cap, send_key
from herald.service_layer.ports import FrequencyCaps

T0 = 1_000_000.0
HOUR = 3_600.0
DAY = 24 * HOUR
A, B, C, D = "a" * 24, "b" * 24, "c" * 24, "d" * 24
"""Campaign ids (24 hex digits, as ``ObjectId`` strings are)."""


def rule(spec: str) -> CapRule:
    windows = parse_cap(spec).windows
    return CapRule(windows, max(w.seconds for w in windows))


def sends(campaign_id: str, *positions: int, seq: int = 0) -> list[str]:
    return [send_key(campaign_id, seq, position) for position in positions]


class CapContract:
    async def test_a_second_campaign_within_the_window_is_capped_not_the_first(
            self, caps: FrequencyCaps) -> None:
        one = rule("1/24h")
        assert await caps.admit(A, one, {"u:1": sends(A, 0), "u:2": sends(A, 1)},
                                T0) == {"u:1", "u:2"}
        assert await caps.admit(B, one, {"u:1": sends(B, 0), "u:3": sends(B, 1)},
                                T0 + HOUR) == {"u:3"}

    async def test_the_window_rolls_a_send_exactly_a_window_old_is_out_of_it(
            self, caps: FrequencyCaps) -> None:
        two = rule("2/24h")
        assert await caps.admit(A, two, {"u:1": sends(A, 0)}, T0) == {"u:1"}
        assert await caps.admit(B, two, {"u:1": sends(B, 0)}, T0 + 10 * HOUR) == {"u:1"}
        assert await caps.admit(C, two, {"u:1": sends(C, 0)}, T0 + 20 * HOUR) == set()
        assert await caps.admit(C, two, {"u:1": sends(C, 0)}, T0 + DAY - 1) == set()
        assert await caps.admit(C, two, {"u:1": sends(C, 0)}, T0 + DAY) == {"u:1"}
        # B (at 10 h) and C (at 24 h) are within the 24 h before 30 h: D waits for B to age.
        assert await caps.admit(D, two, {"u:1": sends(D, 0)}, T0 + 30 * HOUR) == set()
        assert await caps.admit(D, two, {"u:1": sends(D, 0)}, T0 + 34 * HOUR) == {"u:1"}

    async def test_every_window_must_pass(self, caps: FrequencyCaps) -> None:
        both = rule("1/1h,2/24h")
        assert await caps.admit(A, both, {"u:1": sends(A, 0)}, T0) == {"u:1"}
        assert await caps.admit(B, both, {"u:1": sends(B, 0)}, T0 + HOUR / 2) == set()  # 1/1h
        assert await caps.admit(B, both, {"u:1": sends(B, 0)}, T0 + HOUR + 1) == {"u:1"}
        assert await caps.admit(C, both, {"u:1": sends(C, 0)}, T0 + 3 * HOUR) == set()  # 2/24h
        assert await caps.admit(C, both, {"u:1": sends(C, 0)}, T0 + DAY + 1) == {"u:1"}

    async def test_a_person_with_several_devices_gets_the_campaign_on_each_counted_once(
            self, caps: FrequencyCaps) -> None:
        one = rule("1/24h")
        assert await caps.admit(A, one, {"u:1": sends(A, 0, 1)}, T0) == {"u:1"}
        # Their third device in another chunk of the same campaign: the same campaign.
        assert await caps.admit(A, one, {"u:1": sends(A, 7, seq=3)}, T0 + 1) == {"u:1"}
        assert await caps.admit(B, one, {"u:1": sends(B, 0, 1, 2)}, T0 + 2) == set()
        two = rule("2/24h")  # three devices of one campaign count as one campaign
        assert await caps.admit(B, two, {"u:1": sends(B, 0, 1, 2)}, T0 + 3) == {"u:1"}

    async def test_a_send_checked_again_after_a_crash_is_admitted_not_capped_by_itself(
            self, caps: FrequencyCaps) -> None:
        one = rule("1/24h")
        assert await caps.admit(A, one, {"u:1": sends(A, 0)}, T0) == {"u:1"}
        assert await caps.admit(A, one, {"u:1": sends(A, 0)}, T0 + 60) == {"u:1"}

    async def test_a_released_send_counts_no_more_unless_another_device_got_it(
            self, caps: FrequencyCaps) -> None:
        one = rule("1/24h")
        assert await caps.admit(A, one, {"u:1": sends(A, 0), "u:2": sends(A, 1, 2)},
                                T0) == {"u:1", "u:2"}
        await caps.release({"u:1": sends(A, 0), "u:2": sends(A, 1)})  # u:2's 2nd device got it
        assert await caps.admit(B, one, {"u:1": sends(B, 0), "u:2": sends(B, 1)},
                                T0 + 1) == {"u:1"}

    async def test_people_are_capped_each_alone_in_one_batch(self, caps: FrequencyCaps) -> None:
        one = rule("1/24h")
        await caps.admit(A, one, {f"u:{i}": sends(A, i) for i in range(0, 10, 2)}, T0)
        admitted = await caps.admit(B, one, {f"u:{i}": sends(B, i) for i in range(10)}, T0 + 1)
        assert admitted == {f"u:{i}" for i in range(1, 10, 2)}

    async def test_sends_only_counted_are_seen_by_a_capped_campaign(
            self, caps: FrequencyCaps) -> None:
        counted_only = CapRule((), int(DAY))  # a campaign that opted out of the cap
        for campaign_id in (A, B):
            assert await caps.admit(campaign_id, counted_only, {"u:1": sends(campaign_id, 0)},
                                    T0) == {"u:1"}
        assert await caps.admit(C, rule("2/24h"), {"u:1": sends(C, 0)}, T0 + 1) == set()

    async def test_what_is_older_than_the_longest_window_is_forgotten(
            self, caps: FrequencyCaps) -> None:
        one = rule("1/1h")
        assert await caps.admit(A, one, {"u:1": sends(A, 0)}, T0) == {"u:1"}
        assert await caps.admit(A, one, {"u:1": sends(A, 1)}, T0 + HOUR + 1) == {"u:1"}
        # A's first send was forgotten and its second counted anew, an hour later.
        assert await caps.admit(B, one, {"u:1": sends(B, 0)}, T0 + HOUR + 2) == set()

    async def test_histories_read_what_is_counted_without_changing_it(
            self, caps: FrequencyCaps) -> None:
        one = rule("1/24h")
        assert await caps.admit(A, one, {"u:1": sends(A, 0, 1), "u:2": sends(A, 2)},
                                T0) == {"u:1", "u:2"}
        read = await caps.histories(["u:1", "u:2", "u:3"])
        assert {person: sorted(read[person]) for person in read} == {
            "u:1": [(sends(A, 0)[0], T0), (sends(A, 1)[0], T0)], "u:2": [(sends(A, 2)[0], T0)]}
        assert await caps.histories(["u:1"]) == {"u:1": read["u:1"]}  # nothing changed
        assert await caps.admit(B, one, {"u:1": sends(B, 0)}, T0 + HOUR) == set()
