"""What goes to FCM: the app's data contract, the replacement key, FCM's size limit, and the
per-device request body.

The API refuses anything FCM would refuse, before a campaign exists, so a campaign never fails
half-way because of its own content.

**Replacement key.** Every message of a campaign carries one key, so that a later message with the
same key replaces it on the device instead of showing a second notification:

- ``android.notification.tag``: the notification shown in the Android tray;
- ``android.collapse_key``: a message FCM still holds for an offline Android device;
- ``apns.headers["apns-collapse-id"]``: the notification shown on iOS, and one APNs still holds;
- ``webpush.notification.tag``: the notification a browser shows (the Notification API's ``tag``);
- ``webpush.headers["Topic"]``: a message the web push service still holds (RFC 8030 §5.4).

By default the key is derived from the campaign id (``herald-<id>``, 31 characters); a campaign
may name its own (see :data:`REPLACE_KEY_PATTERN`). A web push ``Topic`` must be 1 to 32
characters of the URL- and filename-safe base64 alphabet (RFC 8030 §5.4, a push service answers
400 otherwise): a key that qualifies is used as it is (every default key does), any other is
replaced by the first 32 characters of the base64url encoding of its SHA-256
(:func:`web_push_topic`).
"""

from __future__ import annotations

import base64
import hashlib
import re
from dataclasses import dataclass
from typing import Annotated, Literal

import orjson
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, HttpUrl, StrictStr, field_validator

MAX_PAYLOAD_BYTES = 4096
"""FCM's limit on a message's payload, in bytes of JSON.

FCM documents 4096 bytes for "the payload" without saying which fields count. Herald counts
everything a campaign's messages share (notification, data and the replacement blocks; all but
the token), which is at least what FCM can count, so nothing Herald accepts is too big for FCM.
"""

DATA_KEY_PATTERN = re.compile(r"[a-z][A-Za-z0-9]{0,127}")
RESERVED_DATA_KEYS = frozenset({"from", "notification", "message_type", "collapse_key"})
RESERVED_DATA_PREFIXES = ("google", "gcm")


MAX_DATA_KEY_CHARS = 128


def _app_data_key(key: str) -> str:
    if len(key) > MAX_DATA_KEY_CHARS:
        raise ValueError(f"data key {key[:20]!r}... must be camelCase like 'landingUrl', at most "
                         f"{MAX_DATA_KEY_CHARS} characters")
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


MAX_DATA_KEYS = 100


DataKey = Annotated[str, AfterValidator(_app_data_key)]
def _fits_a_message(value: str) -> str:
    if len(value) > MAX_PAYLOAD_BYTES:
        raise PayloadTooLarge(len(value.encode()), at_least=True)
    return value


DataValue = Annotated[StrictStr, AfterValidator(_fits_a_message)]
"""A data value: refused at once if longer than a whole message may be, before the content's
own checks (its size with everything else, its placeholders)."""
DataMap = Annotated[dict[DataKey, DataValue], Field(max_length=MAX_DATA_KEYS)]
"""The mobile app's data contract: camelCase keys, string values only."""


class PayloadTooLarge(ValueError):
    def __init__(self, size: int, *, at_least: bool = False) -> None:
        super().__init__(
            f"the message (notification, data and replacement key) is {'over ' if at_least else ''}"
            f"{size} bytes of JSON; FCM accepts at most {MAX_PAYLOAD_BYTES}"
        )
        self.size = size


REPLACE_KEY_PREFIX = "herald-"
MAX_REPLACE_KEY_BYTES = 64
"""APNs refuses an ``apns-collapse-id`` over 64 bytes, and FCM refuses the message for it."""

REPLACE_KEY_PATTERN = re.compile(r"[A-Za-z0-9_.:-]{1,64}")
"""A key a campaign may name: 1 to 64 ASCII letters, digits, ``_``, ``-``, ``.`` or ``:``.

That is a subset of what every carrier accepts: ASCII makes 64 characters 64 bytes (the APNs
limit), no character needs escaping in JSON or in an HTTP header, and none is a space or a
control character, which an HTTP header value cannot carry.
"""

WEB_PUSH_TOPIC_PATTERN = re.compile(r"[A-Za-z0-9_-]{1,32}")
"""RFC 8030 §5.4: at most 32 characters of the URL- and filename-safe base64 alphabet."""

LONGEST_DEFAULT_KEY = f"{REPLACE_KEY_PREFIX}{'0' * 24}"
"""As long as any derived key (campaign ids are 24-hex-digit ObjectIds): what the size rule counts
before a campaign has an id."""


def _replace_key(key: str) -> str:
    if not REPLACE_KEY_PATTERN.fullmatch(key):
        raise ValueError(
            f"replace_key {key!r} must be 1 to {MAX_REPLACE_KEY_BYTES} characters, each an ASCII "
            "letter, a digit, '_', '-', '.' or ':' (it becomes the Android notification tag and "
            "collapse_key, the APNs apns-collapse-id header and the web push tag and Topic)")
    return key


ReplaceKey = Annotated[str, AfterValidator(_replace_key)]
"""A campaign's own replacement key, validated as :data:`REPLACE_KEY_PATTERN` says."""


def default_replace_key(campaign_id: str) -> str:
    """The key a campaign's messages carry when it names none: ``herald-<campaign id>``."""
    return f"{REPLACE_KEY_PREFIX}{campaign_id}"


def replace_key_for(campaign_id: str, named: str | None) -> str:
    """The key a campaign's messages carry: the one it named, else the one derived from its id."""
    return named if named else default_replace_key(campaign_id)


def web_push_topic(replace_key: str) -> str:
    """The key itself if it is a valid RFC 8030 Topic, else 32 characters of its SHA-256.

    Deterministic, so every message with one key carries one Topic.
    """
    if WEB_PUSH_TOPIC_PATTERN.fullmatch(replace_key):
        return replace_key
    digest = hashlib.sha256(replace_key.encode()).digest()
    return base64.urlsafe_b64encode(digest).decode()[:32]


MAX_TTL_S = 2_419_200
"""FCM keeps a message for an offline device at most 4 weeks (its default too)."""
ANALYTICS_LABEL_PATTERN = r"^[a-zA-Z0-9-_.~%]{1,50}$"
"""Google's pattern for ``fcm_options.analytics_label`` (FCM's "Message delivery data")."""
NAME_PATTERN = r"^[A-Za-z0-9_.:-]{1,100}$"
"""Channel ids, sounds, click actions and categories: resource names on the phone."""


class ClickActions(BaseModel):
    """What a tap on the notification opens, per platform."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    android: str | None = Field(
        default=None, pattern=NAME_PATTERN,
        description="Android intent action the tap starts (android.notification.click_action)")
    ios: str | None = Field(
        default=None, pattern=NAME_PATTERN,
        description="APNs notification category, whose actions the app defines (aps.category)")
    web: str | None = Field(
        default=None, max_length=2000,
        description="HTTPS page a browser opens (webpush.fcm_options.link)")

    @field_validator("web")
    @classmethod
    def _https(cls, web: str | None) -> str | None:
        if web is not None and HttpUrl(web).scheme != "https":
            raise ValueError("must be an https:// link (FCM refuses any other)")
        return web


class SendOptions(BaseModel):
    """How the platforms deliver and show a campaign's messages; each omitted option keeps
    FCM's (and the platform's) default."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    ttl_s: int | None = Field(
        default=None, ge=0, le=MAX_TTL_S,
        description="Seconds FCM, APNs and web push keep the message for a device that is "
                    "offline; 0: deliver now or never. Omitted: 4 weeks")
    priority: Literal["high", "normal"] | None = Field(
        default=None, description="high wakes a sleeping device at once; normal may wait for "
                                  "the device to wake (battery). Omitted: high for notifications")
    android_channel_id: str | None = Field(
        default=None, pattern=NAME_PATTERN,
        description="Android notification channel the app created (sound, importance)")
    sound: str | None = Field(
        default=None, pattern=NAME_PATTERN,
        description="'default', or a sound file bundled in the app (Android and iOS)")
    badge: int | None = Field(default=None, ge=0, le=99_999,
                              description="iOS app icon badge number; 0 clears it")
    click: ClickActions | None = None
    analytics_label: str | None = Field(
        default=None, pattern=ANALYTICS_LABEL_PATTERN,
        description="Label of the campaign in Firebase's message delivery reports")


SIZED_NOW_S = 9_999_999_999.0
"""The instant the size rule dates an APNs expiry at: the longest one (ten digits)."""

_PRIORITY = {"high": ("HIGH", "10", "high"), "normal": ("NORMAL", "5", "normal")}
"""Android ``priority``, APNs ``apns-priority``, web push ``Urgency`` for each priority."""


def build_payload(title: str, body: str, data: dict[str, str], image_url: str | None = None, *,
                  replace_key: str, options: SendOptions | None = None,
                  now_s: float = 0.0) -> dict[str, object]:
    """The FCM ``message`` fields shared by every recipient of a campaign (all but the token),
    with ``replace_key`` in every platform's replacement fields (see the module's table) and
    the ``options`` in each platform's own block. ``now_s`` (epoch seconds) dates the APNs
    expiry a TTL gives."""
    notification: dict[str, str] = {"title": title, "body": body}
    if image_url:
        notification["image"] = image_url
    payload: dict[str, object] = {"notification": notification}
    if data:
        payload["data"] = dict(data)
    payload.update(replacement_fields(replace_key))
    if options is not None:
        _apply_options(payload, options, now_s)
    return payload


def _apply_options(payload: dict[str, object], options: SendOptions, now_s: float) -> None:
    android, apns, webpush = (_block(payload, name) for name in ("android", "apns", "webpush"))
    aps: dict[str, object] = {}
    if options.ttl_s is not None:
        android["ttl"] = f"{options.ttl_s}s"
        _block(apns, "headers")["apns-expiration"] = \
            "0" if options.ttl_s == 0 else str(int(now_s) + options.ttl_s)
        _block(webpush, "headers")["TTL"] = str(options.ttl_s)
    if options.priority is not None:
        android_priority, apns_priority, urgency = _PRIORITY[options.priority]
        android["priority"] = android_priority
        _block(apns, "headers")["apns-priority"] = apns_priority
        _block(webpush, "headers")["Urgency"] = urgency
    if options.android_channel_id is not None:
        _block(android, "notification")["channel_id"] = options.android_channel_id
    if options.sound is not None:
        _block(android, "notification")["sound"] = aps["sound"] = options.sound
    if options.badge is not None:
        aps["badge"] = options.badge
    _apply_click(android, aps, webpush, options.click)
    if aps:
        apns["payload"] = {"aps": aps}
    if options.analytics_label is not None:
        payload["fcm_options"] = {"analytics_label": options.analytics_label}


def _apply_click(android: dict[str, object], aps: dict[str, object], webpush: dict[str, object],
                 click: ClickActions | None) -> None:
    if click is None:
        return
    if click.android is not None:
        _block(android, "notification")["click_action"] = click.android
    if click.ios is not None:
        aps["category"] = click.ios
    if click.web is not None:
        webpush["fcm_options"] = {"link": click.web}


def _block(parent: dict[str, object], name: str) -> dict[str, object]:
    block = parent.setdefault(name, {})
    assert isinstance(block, dict)
    return block


def replacement_fields(replace_key: str) -> dict[str, object]:
    """The ``android``, ``apns`` and ``webpush`` blocks that make a message replace an earlier
    one with the same key."""
    return {
        "android": {"collapse_key": replace_key, "notification": {"tag": replace_key}},
        "apns": {"headers": {"apns-collapse-id": replace_key}},
        "webpush": {"headers": {"Topic": web_push_topic(replace_key)},
                    "notification": {"tag": replace_key}},
    }


def payload_size(payload: dict[str, object]) -> int:
    """Bytes of compact JSON, the measure FCM's limit is expressed in; give it what
    :func:`build_payload` returns, so the key is counted as it is sent."""
    return len(orjson.dumps(payload))


def check_payload_size(payload: dict[str, object]) -> None:
    """Raise :class:`PayloadTooLarge` if ``payload`` is over :data:`MAX_PAYLOAD_BYTES`."""
    size = payload_size(payload)
    if size > MAX_PAYLOAD_BYTES:
        raise PayloadTooLarge(size)


# --- the moment of sending ---------------------------------------------------------------------------
EXPIRY_FIELD = b'"apns-expiration":"'
"""The one time-relative field of a message, as JSON: APNs' ``apns-expiration`` is an absolute
epoch second (the moment of sending + the TTL); the others a TTL gives (Android ``ttl``, web push
``TTL``) are durations and do not depend on the moment.

In the compact JSON of a payload these bytes are the header's key and the opening quote of its
value, and nothing else can contain them: inside a JSON string every ``"`` is escaped (so no text
of the campaign's can hold ``":"``), data keys are camelCase (no ``-``), and the other header
names are Herald's own.
"""


def expires_after_s(options: SendOptions | None) -> int | None:
    """Seconds after the moment of sending at which a message's APNs expiry lies, or None if no
    field of its depends on that moment (no TTL; or ``ttl_s`` 0, sent as the constant ``0``:
    deliver now or never)."""
    ttl_s = None if options is None else options.ttl_s
    return ttl_s or None


def expiry_at(now_s: float, expires_after_s: int) -> bytes:
    """``apns-expiration`` for a request sent at ``now_s`` (epoch seconds), as its JSON digits."""
    return str(int(now_s) + expires_after_s).encode()


SIZED_EXPIRY_BYTES = len(expiry_at(SIZED_NOW_S, MAX_TTL_S))
"""What the size rule counts for the expiry's value whatever the TTL: its longest (11 digits),
as at creation (:data:`SIZED_NOW_S`), so a size measured before the moment of sending holds at it."""


def split_at_expiry(encoded: bytes) -> tuple[bytes, bytes]:
    """``encoded`` (compact JSON with an APNs expiry) cut around the expiry's value: the bytes
    before it and the bytes after it (its closing quote first), to splice each request's own
    value between (:class:`WireBody`)."""
    start = encoded.index(EXPIRY_FIELD) + len(EXPIRY_FIELD)
    return encoded[:start], encoded[encoded.index(b'"', start):]


@dataclass(slots=True)  # not frozen: a frozen dataclass costs 3x to build, and one is built
class WireBody:          # per recipient of a per-device campaign (never changed once built)
    """An FCM request body made ahead of its sending (a per-device message, rendered when its
    chunk is taken up), whose time-relative field is filled only when it goes on the wire:
    :meth:`at` with the moment of that request, so a chunk held by a pause, a rollout's hold or a
    campaign's rate cap still sends an expiry counted from its own sending."""

    before: bytes
    after: bytes = b""
    expires_after_s: int | None = None
    """None: the body has no time-relative field, and ``before`` is all of it."""

    def at(self, now_s: float) -> bytes:
        """The bytes of a request that starts at ``now_s`` (epoch seconds)."""
        if self.expires_after_s is None:
            return self.before
        return b"".join((self.before, expiry_at(now_s, self.expires_after_s), self.after))


class MessageTemplate:
    """Pre-encoded FCM v1 request body; only the token (and, with a TTL, the APNs expiry)
    differs between requests.

    Encoding the shared part once and splicing each token in keeps the per-message cost of the
    sender to one small ``orjson.dumps`` and a concatenation. A message that expires
    ``expires_after_s`` after its sending (:func:`expires_after_s`) is cut around the expiry's
    value once, and each request's value is spliced in the same way: the digits of one integer.
    """

    __slots__ = ("_after", "_before", "_expires_after_s", "_head")

    def __init__(self, payload: dict[str, object], expires_after_s: int | None = None) -> None:
        shared = orjson.dumps(payload)
        self._head = b'{"message":{"token":'
        rest = b"," + shared[1:] + b"}"
        self._expires_after_s = expires_after_s
        self._before, self._after = split_at_expiry(rest) if expires_after_s else (rest, b"")

    def body_for(self, token: str, now_s: float | None = None) -> bytes:
        """The request for ``token`` that starts at ``now_s`` (epoch seconds; needed only by a
        message that expires, which refuses to be made without it)."""
        if self._expires_after_s is None:
            return self._head + orjson.dumps(token) + self._before
        if now_s is None:
            raise ValueError("this message expires relative to its sending: give now_s")
        return b"".join((self._head, orjson.dumps(token), self._before,
                         expiry_at(now_s, self._expires_after_s), self._after))

    def wire_body_for(self, token: str) -> WireBody:
        """The request for ``token``, its expiry (if any) left to the moment it is sent."""
        return WireBody(b"".join((self._head, orjson.dumps(token), self._before)), self._after,
                        self._expires_after_s)
