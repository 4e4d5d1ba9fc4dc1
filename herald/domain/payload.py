"""What goes to FCM: the app's data contract, FCM's size limit, and the per-device request body.

The API refuses anything FCM would refuse, before a campaign exists, so a campaign never fails
half-way because of its own content.
"""

from __future__ import annotations

import re
from typing import Annotated

import orjson
from pydantic import AfterValidator, Field, StrictStr

MAX_PAYLOAD_BYTES = 4096
"""FCM's limit on a message's payload (notification plus data), in bytes of JSON."""

DATA_KEY_PATTERN = re.compile(r"[a-z][A-Za-z0-9]{0,127}")
RESERVED_DATA_KEYS = frozenset({"from", "notification", "message_type", "collapse_key"})
RESERVED_DATA_PREFIXES = ("google", "gcm")


def _app_data_key(key: str) -> str:
    if not DATA_KEY_PATTERN.fullmatch(key):
        hint = _camel_case(key)
        suggestion = f" (did you mean {hint!r}?)" if DATA_KEY_PATTERN.fullmatch(hint) else ""
        raise ValueError(f"data key {key!r} must be camelCase like 'landingUrl'{suggestion}")
    if key in RESERVED_DATA_KEYS or key.startswith(RESERVED_DATA_PREFIXES):
        raise ValueError(f"data key {key!r} is reserved by FCM")
    return key


def _camel_case(key: str) -> str:
    head, *rest = re.split(r"[_\-\s]+", key.strip("_- "))
    return head[:1].lower() + head[1:] + "".join(part[:1].upper() + part[1:] for part in rest)


DataKey = Annotated[str, AfterValidator(_app_data_key)]
DataMap = Annotated[dict[DataKey, StrictStr], Field(max_length=100)]
"""The mobile app's data contract: camelCase keys, string values only."""


class PayloadTooLarge(ValueError):
    def __init__(self, size: int) -> None:
        super().__init__(
            f"notification plus data is {size} bytes of JSON; FCM accepts at most "
            f"{MAX_PAYLOAD_BYTES}"
        )
        self.size = size


def build_payload(
    title: str, body: str, data: dict[str, str], image_url: str | None = None
) -> dict[str, object]:
    """The FCM ``message`` fields shared by every recipient of a campaign (all but the token)."""
    notification: dict[str, str] = {"title": title, "body": body}
    if image_url:
        notification["image"] = image_url
    payload: dict[str, object] = {"notification": notification}
    if data:
        payload["data"] = dict(data)
    return payload


def payload_size(payload: dict[str, object]) -> int:
    """Bytes of compact JSON, the measure FCM's limit is expressed in."""
    return len(orjson.dumps(payload))


def check_payload_size(payload: dict[str, object]) -> None:
    size = payload_size(payload)
    if size > MAX_PAYLOAD_BYTES:
        raise PayloadTooLarge(size)


class MessageTemplate:
    """Pre-encoded FCM v1 request body; only the token differs between recipients.

    Encoding the shared part once and splicing each token in keeps the per-message cost of the
    sender to one small ``orjson.dumps`` and a concatenation.
    """

    __slots__ = ("_head", "_tail")

    def __init__(self, payload: dict[str, object]) -> None:
        shared = orjson.dumps(payload)
        self._head = b'{"message":{"token":'
        self._tail = b"," + shared[1:] + b"}"

    def body_for(self, token: str) -> bytes:
        return self._head + orjson.dumps(token) + self._tail
