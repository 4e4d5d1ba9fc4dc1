"""Small validated value types shared by the HTTP and AMQP contracts."""

from __future__ import annotations

import re
from typing import Annotated
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import AfterValidator, Field, StrictBool, StrictFloat, StrictInt, StrictStr

from herald.domain.locales import MAX_TAG_CHARS

OBJECT_ID_PATTERN = re.compile(r"^[0-9a-f]{24}$")

ObjectIdStr = Annotated[
    str,
    Field(pattern=OBJECT_ID_PATTERN.pattern, description="24 lowercase hex digits"),
]
"""Identifier of a campaign or schedule, as it appears in URLs and messages."""

MAX_TOKEN_CHARS = 4096
TOKEN_PATTERN = r"^[^\s]+$"
Token = Annotated[str, Field(min_length=1, max_length=MAX_TOKEN_CHARS, pattern=TOKEN_PATTERN)]
"""An FCM registration token or Firebase Installation ID: opaque, no whitespace."""

MAX_USER_ID_CHARS = 128
UserId = Annotated[str, Field(min_length=1, max_length=MAX_USER_ID_CHARS)]
"""The app backend's own id of a user (a UUID, a number, a Firebase UID...)."""

MAX_TOPIC_CHARS = 900
Topic = Annotated[str, Field(pattern=r"^[a-zA-Z0-9\-_.~%]{1,900}$")]
"""Same alphabet (and length: 900) FCM accepts for topic names."""

MAX_ATTRIBUTE_NAME_CHARS = 64
AttributeName = Annotated[str, Field(pattern=r"^[A-Za-z][A-Za-z0-9_]{0,63}$")]
"""Free device attribute names; no ``$`` or ``.``, so a name can never become a query operator."""

MAX_ATTRIBUTE_TEXT_CHARS = 1024
"""A device attribute's text: a name, an e-mail address (RFC 5321: 254), a plan, a version, a
link (1,024 as the longest; a push message holds 4,096 bytes in all)."""

Scalar = (Annotated[StrictStr, Field(max_length=MAX_ATTRIBUTE_TEXT_CHARS)] | StrictBool
          | StrictInt | StrictFloat)
"""Attribute values: never objects, so ``{"$gt": ...}`` cannot be smuggled in as a value."""

MAX_CONDITION_TEXT_CHARS = 256
"""A text an audience compares attributes with (``eq``, ``in``, a range bound)."""

ConditionValue = (Annotated[StrictStr, Field(max_length=MAX_CONDITION_TEXT_CHARS)] | StrictBool
                  | StrictInt | StrictFloat)
"""What an audience's attribute condition compares with: a :data:`Scalar`, shorter."""

Locale = Annotated[str, Field(max_length=MAX_TAG_CHARS,
                              pattern=r"^[A-Za-z]{2,3}([-_][A-Za-z0-9]{2,8})*$")]
"""A device's locale (``es``, ``pt_BR``): a language tag's shape, at most 35 characters
(``herald.domain.locales.MAX_TAG_CHARS``)."""


_NOT_PLAIN = re.compile("[\x00-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")
"""Control characters (C0, C1, DEL) and the bidirectional marks and overrides that make a
reason or a name read differently from what it is (a log line, the console, a CSV cell)."""


def _plain(text: str) -> str:
    found = _NOT_PLAIN.search(text)
    if found is not None:
        raise ValueError(f"control or bidirectional-override character U+{ord(found.group()):04X} "
                         f"at position {found.start()}: plain printable text only")
    return text


PlainText = Annotated[str, AfterValidator(_plain)]
"""Text people read as written: a reason, a name a publisher gives itself."""


def _known_timezone(name: str) -> str:
    try:
        ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise ValueError(f"unknown IANA timezone {name!r}") from exc
    return name


MAX_TIMEZONE_CHARS = 64
TimezoneName = Annotated[str, Field(min_length=1, max_length=MAX_TIMEZONE_CHARS),
                         AfterValidator(_known_timezone)]
