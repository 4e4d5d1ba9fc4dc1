"""A chunk's recipients in its document: parallel arrays, read back as written, and chunks
written before (an array of subdocuments) still read and erased in their own format."""

from __future__ import annotations

import bson

from herald.adapters import chunk_codec
from herald.adapters.chunk_codec import ERASED_RECIPIENT, decode, encode, erased_in, holding
from herald.domain.erasure import ErasedPerson
from herald.domain.messages import Profile, Recipient
from herald.domain.suppression import Rule

PLAIN = [Recipient(token="tok-a", user_id="u1"), Recipient(token="tok-b"),
         Recipient(token="tok-c", user_id="u3")]
PERSONAL = [Recipient(token="tok-a", user_id="u1",
                      profile=Profile(platform="ios", locale="pt-BR", attributes={"name": "Ana"})),
            Recipient(token="tok-b", profile=Profile()),
            Recipient(token="tok-c", user_id="u3", profile=Profile(timezone="Europe/Lisbon"))]


def legacy(recipients: list[Recipient]) -> dict[str, object]:
    """A chunk document's recipients as they were stored before the parallel arrays."""
    return {"recipients": [r.stored() for r in recipients]}


def test_recipients_read_back_as_written() -> None:
    for recipients in (PLAIN, PERSONAL, [Recipient(token="only")]):
        assert decode(encode(recipients)) == tuple(recipients)


def test_recipients_quiet_hours_skip_keep_their_rule_in_either_format() -> None:
    held = [Recipient(token="tok-a", user_id="u1", suppressed=Rule.QUIET_HOURS),
            Recipient(token="tok-b")]
    assert encode(held)["s"] == ["quiet_hours", None]
    assert decode(encode(held)) == tuple(held)
    assert decode(legacy(held)) == tuple(held)
    count, changes = erased_in(encode(held), ErasedPerson("u1"))
    assert count == 1 and changes["s"] is None  # nobody left with a rule: the array goes
    assert decode({**encode(held), **changes}) == (ERASED_RECIPIENT, held[1])


def test_a_plain_campaign_stores_tokens_and_user_ids_only() -> None:
    assert encode(PLAIN) == {"t": ["tok-a", "tok-b", "tok-c"], "u": ["u1", None, "u3"]}
    assert encode([Recipient(token="x")]) == {"t": ["x"]}


def test_profiles_keep_only_their_fields_under_short_keys() -> None:
    assert encode(PERSONAL)["p"] == [{"pl": "ios", "lo": "pt-BR", "a": {"name": "Ana"}}, {},
                                     {"tz": "Europe/Lisbon"}]


def test_erased_places_are_empty_tokens() -> None:
    recipients = [PLAIN[0], ERASED_RECIPIENT, PLAIN[2]]
    stored = encode(recipients)
    assert stored["t"] == ["tok-a", "", "tok-c"]
    assert decode(stored) == tuple(recipients)
    assert decode(stored)[1].erased


def test_a_chunk_written_before_reads_as_it_was_written() -> None:
    old = legacy([*PERSONAL, ERASED_RECIPIENT])
    assert decode(old) == (*PERSONAL, ERASED_RECIPIENT)
    assert decode({"recipients": [{"token": "t", "user_id": None}]}) == (Recipient(token="t"),)


def test_the_arrays_save_the_field_names_and_framing_of_every_recipient() -> None:
    """16 bytes or more a recipient (40% of what is not the token); the tokens themselves
    (152 characters here, about 163 for FCM's) stay."""
    recipients = [Recipient(token=f"tok-{i:07d}-" + "x" * 140, user_id=f"u{i}")
                  for i in range(500)]
    new, old = (len(bson.encode(document)) for document in (encode(recipients),
                                                           legacy(recipients)))
    tokens = sum(len(r.token) for r in recipients)
    assert old - new >= 16 * len(recipients)
    assert (new - tokens) <= 0.6 * (old - tokens)


def test_a_person_is_erased_in_either_format() -> None:
    person = ErasedPerson("u3", tokens=frozenset({"tok-b"}))
    count, update = erased_in(encode(PERSONAL), person)
    assert count == 2
    assert decode(update) == (PERSONAL[0], ERASED_RECIPIENT, ERASED_RECIPIENT)
    count, update = erased_in(legacy(PERSONAL), person)
    assert count == 2
    assert decode(update) == (PERSONAL[0], ERASED_RECIPIENT, ERASED_RECIPIENT)


def test_erasing_everyone_with_a_user_id_clears_the_arrays_the_rest_no_longer_need() -> None:
    person = ErasedPerson("u1", tokens=frozenset({"tok-a"}))
    count, update = erased_in(encode(PLAIN[:1]), person)
    assert (count, update) == (1, {"t": [""], "u": None})
    assert decode(update) == (ERASED_RECIPIENT,)


def test_an_erased_place_is_not_erased_twice() -> None:
    person = ErasedPerson("u1")
    stored = encode([ERASED_RECIPIENT, PLAIN[0]])
    count, update = erased_in(stored, person)
    assert count == 1
    assert erased_in({**stored, **update}, person)[0] == 0


def test_the_chunks_holding_a_person_are_found_in_either_format() -> None:
    arms = holding(ErasedPerson("u1", tokens=frozenset({"tok-a"})))
    assert arms == [{"t": "tok-a"}, {"recipients.token": "tok-a"}, {"u": "u1"},
                    {"recipients.user_id": "u1"}]
    assert holding(ErasedPerson(None)) == []


def test_a_chunks_state_is_read_without_any_recipient_field() -> None:
    fields = {*encode(PERSONAL), *legacy(PERSONAL)}
    assert fields <= set(chunk_codec.WITHOUT_RECIPIENTS)
    assert fields <= set(chunk_codec.RECIPIENT_FIELDS)
