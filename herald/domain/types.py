"""Small validated value types shared by the HTTP and AMQP contracts."""

from __future__ import annotations

import re
from typing import Annotated
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import AfterValidator, Field, StrictBool, StrictFloat, StrictInt, StrictStr

OBJECT_ID_PATTERN = re.compile(r"^[0-9a-f]{24}$")

ObjectIdStr = Annotated[
    str,
    Field(pattern=OBJECT_ID_PATTERN.pattern, description="24 lowercase hex digits"),
]
"""Identifier of a campaign or schedule, as it appears in URLs and messages."""

Token = Annotated[str, Field(min_length=1, max_length=4096, pattern=r"^[^\s]+$")]
"""An FCM registration token or Firebase Installation ID: opaque, no whitespace."""

UserId = Annotated[str, Field(min_length=1, max_length=128)]

Topic = Annotated[str, Field(pattern=r"^[a-zA-Z0-9\-_.~%]{1,900}$")]
"""Same alphabet FCM accepts for topic names."""

AttributeName = Annotated[str, Field(pattern=r"^[A-Za-z][A-Za-z0-9_]{0,63}$")]
"""Free device attribute names; no ``$`` or ``.``, so a name can never become a query operator."""

Scalar = StrictStr | StrictBool | StrictInt | StrictFloat
"""Attribute values: never objects, so ``{"$gt": ...}`` cannot be smuggled in as a value."""

Locale = Annotated[str, Field(pattern=r"^[A-Za-z]{2,3}([-_][A-Za-z0-9]{2,8})*$")]


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


TimezoneName = Annotated[str, Field(min_length=1, max_length=64), AfterValidator(_known_timezone)]
