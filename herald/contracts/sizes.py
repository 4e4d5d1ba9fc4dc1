"""How large a request body can be, computed from the limits of what it carries.

A campaign's body is bounded by its fields' own limits: each variant (the campaign's content and
each of its :data:`~herald.domain.rendering.MAX_TRANSLATIONS` translations) fits FCM's 4,096
bytes, an audience lists at most so many users, topics, locales and values, each of a bounded
length. :func:`campaign_body_max_bytes` adds those up, so that the api can refuse a larger body
(413) before reading it, instead of reading 16 MiB and parsing it.

**Counted as clients write JSON.** A character may reach the api as itself (UTF-8, 1 to 4 bytes)
or escaped (``\\uXXXX``, 6 bytes: Python's ``json.dumps`` escapes every non-ASCII character by
default, Go's ``encoding/json`` escapes ``<``, ``>`` and ``&``). So a free text counts
:data:`BYTES_PER_CHARACTER` bytes a character, and a message's text, which FCM's rule measures in
bytes of UTF-8 JSON already, :data:`BYTES_PER_MESSAGE_BYTE` bytes a byte (a two-byte character
escaped is six bytes). Fields whose alphabet is ASCII letters, digits and a few marks (topics,
tags, keys) count a byte a character. Whitespace between tokens is not counted beyond
:data:`SLACK_BYTES`: a body indented for reading, at every limit at once, may not fit.
"""

from __future__ import annotations

from herald.domain.audience import (
    MAX_AUDIENCE_ATTRIBUTES,
    MAX_AUDIENCE_LOCALES,
    MAX_AUDIENCE_TOPICS,
    MAX_AUDIENCE_USER_IDS,
    MAX_CONDITION_VALUES,
)
from herald.domain.locales import MAX_TAG_CHARS
from herald.domain.payload import MAX_PAYLOAD_BYTES
from herald.domain.rendering import MAX_TRANSLATIONS
from herald.domain.types import (
    MAX_ATTRIBUTE_NAME_CHARS,
    MAX_CONDITION_TEXT_CHARS,
    MAX_TOPIC_CHARS,
    MAX_USER_ID_CHARS,
)

BYTES_PER_CHARACTER = 6
"""A character of free text as a client may write it: at most ``\\uXXXX``."""
BYTES_PER_MESSAGE_BYTE = 3
"""A byte of a message's UTF-8 JSON as a client may write it: a two-byte character as
``\\uXXXX`` (six bytes)."""
VARIANT_FRAME_BYTES = 128
"""A variant's JSON around its texts: its tag, ``"title":``, ``"body":``, ``"data":{}``."""
ITEM_FRAME_BYTES = 3
"""A list item's quotes and comma."""
SLACK_BYTES = 64 * 1024
"""Everything else a campaign carries (name, schedule, timezone, options, rollout, key):
each a few hundred bytes at most."""


def content_max_bytes() -> int:
    """The campaign's content and its translations: each variant at FCM's 4,096 bytes."""
    variants = 1 + MAX_TRANSLATIONS
    return variants * (MAX_PAYLOAD_BYTES * BYTES_PER_MESSAGE_BYTE + VARIANT_FRAME_BYTES)


def audience_max_bytes() -> int:
    """An audience at every limit at once: its users, topics, locales and attribute conditions
    (their ``in`` values together, and a range's four bounds on each attribute)."""
    condition_text = MAX_CONDITION_TEXT_CHARS * BYTES_PER_CHARACTER + ITEM_FRAME_BYTES
    return (MAX_AUDIENCE_USER_IDS * (MAX_USER_ID_CHARS * BYTES_PER_CHARACTER + ITEM_FRAME_BYTES)
            + MAX_AUDIENCE_TOPICS * (MAX_TOPIC_CHARS + ITEM_FRAME_BYTES)
            + MAX_AUDIENCE_LOCALES * (MAX_TAG_CHARS + ITEM_FRAME_BYTES)
            + MAX_CONDITION_VALUES * condition_text
            + MAX_AUDIENCE_ATTRIBUTES * (MAX_ATTRIBUTE_NAME_CHARS + 4 * condition_text + 64))


def campaign_body_max_bytes() -> int:
    """The largest body a campaign (create, edit, follow-up, schedule, preview, estimate) can
    need, rounded up to a whole KiB: the bound the api holds those routes' bodies to."""
    total = content_max_bytes() + audience_max_bytes() + SLACK_BYTES
    return -(-total // 1024) * 1024


CAMPAIGN_BODY_MAX_BYTES = campaign_body_max_bytes()
