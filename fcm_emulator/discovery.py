"""FCM v1 request bodies checked against Google's own description of them.

The schema is Google's FCM v1 discovery document as the ``google-api-python-client`` wheel ships it
(``googleapiclient/discovery_cache/documents/fcm.v1.json``), read when the emulator starts: nothing
of it is copied here, so the emulator can disagree with Herald. :class:`Validator` compiles the
document's schemas once into nested checkers, then checks a parsed ``SendMessageRequest`` with
the proto3 JSON mapping Google's front end applies (https://protobuf.dev/programming-guides/json/):

- a message field may be named in lowerCamelCase (the document's name) or by its proto name in
  snake_case (``collapse_key``, ``click_action``: what Herald and firebase-admin send), not both
  at once; map keys are taken as they are; ``null`` means "not set";
- ``int32``/``uint32``/``int64``/``uint64`` as a JSON number or a decimal string, within range;
  ``number`` as a JSON number or a numeric string (``"NaN"``, ``"Infinity"`` too); booleans as
  ``true``/``false`` only;
- enums by name or by number; a name in lower case is taken as its upper-case value (firebase-admin
  sends ``android.priority`` as ``"high"``, and FCM accepts it);
- ``google-duration`` as ``^-?\\d+(\\.\\d{1,9})?s$``, ``google-datetime`` as RFC 3339;
- a map (``additionalProperties``) checks every value; ``type: any`` takes any JSON.

Then FCM's own rules, the ones the document states in its descriptions or FCM's documentation
states for these fields (:func:`fcm_rules`): exactly one target among ``token``, ``topic``,
``condition``, ``fid``; no reserved key in ``message.data`` (``Message.data``'s description:
"from", "message_type", or any key starting with "google." or "gcm.notification."); ``android``
and ``androidV2`` mutually exclusive (``Message.androidV2``'s description); ``ttl`` within four
weeks (``AndroidConfig.ttl``'s description); analytics labels matching
``^[a-zA-Z0-9-_.~%]{1,50}$`` (FCM's "Understanding message delivery" guide; firebase-admin enforces
the same pattern before sending); a ``topic`` without the "/topics/" prefix (``Message.topic``'s
description) matching ``[a-zA-Z0-9-_.~%]{1,900}`` (``TopicSubscription.topicName``'s); an HTTPS
``webpush.fcmOptions.link`` (its description: "For all URL values, HTTPS is required").

A problem is a :class:`Violation`: the field path as Google writes it in a ``google.rpc.BadRequest``
(proto names: ``message.android.ttl``, ``message.data[0].value``) and a text modelled on Google's.
"""

from __future__ import annotations

import functools
import json
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from importlib import resources
from typing import Any

import orjson

DOCUMENT_PACKAGE = "googleapiclient"
DOCUMENT_PATH = ("discovery_cache", "documents", "fcm.v1.json")
REQUEST_SCHEMA = "SendMessageRequest"
FCM_TYPE_PREFIX = "type.googleapis.com/google.firebase.fcm.v1."

TARGETS = ("token", "topic", "condition", "fid")
RESERVED_DATA_KEYS = frozenset({"from", "message_type"})
RESERVED_DATA_PREFIXES = ("google.", "gcm.notification.")
MAX_TTL_S = 2_419_200  # four weeks
ANALYTICS_LABEL = re.compile(r"[a-zA-Z0-9\-_.~%]{1,50}")
TOPIC_NAME = re.compile(r"[a-zA-Z0-9\-_.~%]{1,900}")
DURATION = re.compile(r"(-?)(\d+)(?:\.(\d{1,9}))?s")
MAX_DURATION_S = 315_576_000_000  # google.protobuf.Duration's range: +-10,000 years
DATETIME = re.compile(r"(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2})(\.\d{1,9})?(Z|[+-]\d{2}:\d{2})")
INTEGER_STRING = re.compile(r"-?\d+")
INTEGER_RANGES = {"int32": (-(2**31), 2**31 - 1), "uint32": (0, 2**32 - 1),
                  "int64": (-(2**63), 2**63 - 1), "uint64": (0, 2**64 - 1)}
PROTO_TYPES = {"int32": "TYPE_INT32", "uint32": "TYPE_UINT32", "int64": "TYPE_INT64",
               "uint64": "TYPE_UINT64", "float": "TYPE_FLOAT", "double": "TYPE_DOUBLE"}
SPECIAL_NUMBERS = frozenset({"NaN", "Infinity", "-Infinity"})

Check = Callable[[Any], None]
"""Raises :class:`Invalid` when the value does not fit; returns nothing when it does."""


@dataclass(frozen=True, slots=True)
class Violation:
    """One reason to refuse a request, as a ``google.rpc.BadRequest`` field violation.

    ``field`` is empty when the request as a whole is at fault; ``rule`` is ``"schema"`` for what
    Google's JSON parser refuses and ``"fcm"`` for FCM's own rules.
    """

    field: str
    description: str
    rule: str = "schema"


class Invalid(Exception):
    """Raised inside the checkers; each enclosing level adds its segment of the path, so the
    path is only built for a request that is refused."""

    def __init__(self, describe: Callable[[str], str], rule: str = "schema") -> None:
        super().__init__()
        self.segments: list[str] = []
        self.describe = describe
        self.rule = rule

    def at(self, segment: str) -> Invalid:
        self.segments.append(segment)
        return self

    def violation(self) -> Violation:
        path = ""
        for segment in reversed(self.segments):
            path = f"{path}{segment}" if segment.startswith("[") or not path else f"{path}.{segment}"
        return Violation(path, self.describe(path), self.rule)


def load_document() -> dict[str, Any]:
    """Google's FCM v1 discovery document, from the installed ``google-api-python-client``."""
    document = resources.files(DOCUMENT_PACKAGE).joinpath(*DOCUMENT_PATH)
    parsed: dict[str, Any] = json.loads(document.read_text(encoding="utf-8"))
    return parsed


@functools.cache  # FCM's rules look fields up by both names on every request
def proto_name(camel: str) -> str:
    """``collapseKey`` -> ``collapse_key``, ``androidV2`` -> ``android_v2``: the proto field name
    the document's lowerCamelCase JSON name was derived from."""
    return re.sub(r"[A-Z]", lambda upper: "_" + upper.group().lower(), camel)


def _json_text(value: Any) -> str:
    return orjson.dumps(value).decode()


def _invalid_value(proto_type: str, value: Any) -> Invalid:
    return Invalid(lambda path: f"Invalid value at '{path}' ({proto_type}), {_json_text(value)}")


# --- scalar checkers ---------------------------------------------------------------------------------
def _string(value: Any) -> None:
    if type(value) is not str:
        raise _invalid_value("TYPE_STRING", value)


def _boolean(value: Any) -> None:
    if type(value) is not bool:
        raise _invalid_value("TYPE_BOOL", value)


def _any(_: Any) -> None:
    return None


def _integer(fmt: str) -> Check:
    low, high = INTEGER_RANGES[fmt]
    proto_type = PROTO_TYPES[fmt]

    def check(value: Any) -> None:
        kind = type(value)
        whole = (kind is int or (kind is float and value.is_integer())
                 or (kind is str and INTEGER_STRING.fullmatch(value) is not None))
        if not whole or not low <= int(value) <= high:
            raise _invalid_value(proto_type, value)

    return check


def _number(fmt: str) -> Check:
    proto_type = PROTO_TYPES.get(fmt, "TYPE_DOUBLE")

    def check(value: Any) -> None:
        kind = type(value)
        if kind is int or kind is float:
            return
        if kind is str and (value in SPECIAL_NUMBERS or _finite_number(value)):
            return
        raise _invalid_value(proto_type, value)

    return check


def _finite_number(text: str) -> bool:
    try:
        return math.isfinite(float(text))
    except ValueError:
        return False


def _duration(value: Any) -> None:
    match = DURATION.fullmatch(value) if type(value) is str else None
    if match is None or int(match.group(2)) > MAX_DURATION_S:
        raise Invalid(lambda path: f"Invalid value at '{path}' (type.googleapis.com/google.protobuf"
                                   f".Duration), Invalid duration {_json_text(value)}")


def _datetime(value: Any) -> None:
    match = DATETIME.fullmatch(value) if type(value) is str else None
    if match is None or not _calendar_time(match.group(1)):
        raise Invalid(lambda path: f"Invalid value at '{path}' (type.googleapis.com/google.protobuf"
                                   f".Timestamp), Invalid time format {_json_text(value)}")


def _calendar_time(text: str) -> bool:
    try:
        datetime.fromisoformat(text)
    except ValueError:
        return False
    return True


def _enum(names: list[str]) -> Check:
    accepted = frozenset(names)
    as_number = _integer("int32")

    def check(value: Any) -> None:
        if type(value) is str:
            if value in accepted or value.upper() in accepted:
                return
        elif type(value) is int:  # proto3 JSON: parsers accept the number as well as the name
            as_number(value)
            return
        raise _invalid_value("TYPE_ENUM", value)

    return check


# --- composite checkers ------------------------------------------------------------------------------
def _array(item: Check, proto_type: str) -> Check:
    def check(value: Any) -> None:
        if type(value) is not list:
            raise _invalid_value(proto_type, value)
        for index, element in enumerate(value):
            try:
                item(element)  # every checker refuses null: a list cannot hold one
            except Invalid as invalid:
                raise invalid.at(f"[{index}]") from None

    return check


def _map(value_check: Check, entry_type: str) -> Check:
    def check(value: Any) -> None:
        if type(value) is not dict:
            raise _invalid_value(entry_type, value)
        for index, item in enumerate(value.values()):
            try:
                value_check(item)  # null included: a map's value cannot be null
            except Invalid as invalid:
                raise invalid.at("value").at(f"[{index}]") from None

    return check


def _struct(value: Any) -> None:
    """A map of ``type: any`` (a ``google.protobuf.Struct``): any JSON object."""
    if type(value) is not dict:
        raise _invalid_value("type.googleapis.com/google.protobuf.Struct", value)


class _Object:
    """A message schema: its fields by both spellings, each with its checker."""

    __slots__ = ("fields", "name", "proto_type")

    def __init__(self, name: str) -> None:
        self.name = name
        self.proto_type = _proto_type_name(name)
        # name as sent -> (proto name, checker, the field's other name if it has one); filled
        # by Validator._object
        self.fields: dict[str, tuple[str, Check, str | None]] = {}

    def __call__(self, value: Any) -> None:
        if type(value) is not dict:
            raise _invalid_value(self.proto_type, value)
        fields = self.fields
        for key, item in value.items():
            entry = fields.get(key)
            if entry is None:
                raise _unknown_name(key)
            proto, check, other_spelling = entry
            if other_spelling is not None and other_spelling in value:
                raise _set_twice(proto)
            if item is None:  # proto3 JSON: null is the field's default, i.e. not set
                continue
            try:
                check(item)
            except Invalid as invalid:
                raise invalid.at(proto) from None


def _proto_type_name(schema: str) -> str:
    if schema == "Color":
        return "type.googleapis.com/google.type.Color"
    return FCM_TYPE_PREFIX + schema


def _unknown_name(key: str) -> Invalid:
    def describe(path: str) -> str:
        where = f" at '{path}'" if path else ""
        return f'Invalid JSON payload received. Unknown name "{key}"{where}: Cannot find field.'

    return Invalid(describe)


def _set_twice(proto: str) -> Invalid:
    def describe(path: str) -> str:
        where = f" at '{path}'" if path else ""
        return (f"Invalid JSON payload received. Field '{proto}'{where} has already been set "
                "(it is named both in lowerCamelCase and in snake_case).")

    return Invalid(describe)


class Validator:
    """Checks ``SendMessageRequest`` bodies against the discovery document it is given."""

    def __init__(self, document: Mapping[str, Any] | None = None) -> None:
        self.document = document if document is not None else load_document()
        self.revision: str = str(self.document.get("revision", ""))
        self._schemas: Mapping[str, Any] = self.document["schemas"]
        self._objects: dict[str, _Object] = {}
        self._request = self._object(REQUEST_SCHEMA)

    def check(self, request: Any) -> Violation | None:
        """The first problem found in a parsed request body, or None if it is one FCM accepts."""
        if type(request) is not dict:
            return Violation("", "Invalid JSON payload received. Root element must be a message.")
        try:
            self._request(request)
            message = request.get("message")
            if message is None:
                return Violation("message", "Required field 'message' is not set.", "fcm")
            fcm_rules(message)
        except Invalid as invalid:
            return invalid.violation()
        return None

    # --- compiling the document, once --------------------------------------------------------------
    def _object(self, name: str) -> _Object:
        compiled = self._objects.get(name)
        if compiled is None:
            compiled = self._objects[name] = _Object(name)  # registered first: $refs may recurse
            for camel, schema in self._schemas[name].get("properties", {}).items():
                check = self._check_for(schema, owner=name, field=camel)
                proto = proto_name(camel)
                two_names = proto != camel
                compiled.fields[camel] = (proto, check, proto if two_names else None)
                compiled.fields[proto] = (proto, check, camel if two_names else None)
        return compiled

    def _check_for(self, schema: Mapping[str, Any], *, owner: str, field: str) -> Check:
        if "$ref" in schema:
            return self._object(schema["$ref"])
        kind, fmt = schema.get("type"), schema.get("format", "")
        if kind == "array":
            item = self._check_for(schema["items"], owner=owner, field=field)
            return _array(item, _scalar_type(schema["items"]))
        if kind == "object" and "additionalProperties" in schema:
            values = schema["additionalProperties"]
            entry = f"{_proto_type_name(owner)}.{field[:1].upper()}{field[1:]}Entry"
            if values.get("type") == "any":
                return _struct
            return _map(self._check_for(values, owner=owner, field=field), entry)
        return _scalar(kind, fmt, schema)


STRING_FORMATS: dict[str, Check] = {"google-duration": _duration, "google-datetime": _datetime}
PLAIN_TYPES: dict[Any, Check] = {"string": _string, "boolean": _boolean, "any": _any}


def _scalar(kind: Any, fmt: str, schema: Mapping[str, Any]) -> Check:
    if kind == "string" and "enum" in schema:
        return _enum(list(schema["enum"]))
    if kind == "string" and fmt in STRING_FORMATS:
        return STRING_FORMATS[fmt]
    if kind == "integer" or (kind == "string" and fmt in INTEGER_RANGES):  # int64: a string
        return _integer(fmt or "int32")
    if kind == "number":
        return _number(fmt)
    if kind in PLAIN_TYPES:
        return PLAIN_TYPES[kind]
    raise ValueError(f"the discovery document has a type this validator does not know: {kind}")


def _scalar_type(schema: Mapping[str, Any]) -> str:
    kind, fmt = schema.get("type"), schema.get("format", "")
    if kind == "string" and fmt == "google-duration":
        return "type.googleapis.com/google.protobuf.Duration"
    if "$ref" in schema:
        return _proto_type_name(schema["$ref"])
    return PROTO_TYPES.get(fmt, "TYPE_BOOL" if kind == "boolean" else "TYPE_STRING")


# --- FCM's own rules, on a message that fits the schema --------------------------------------------
def fcm_rules(message: dict[str, Any]) -> None:
    """Raise :class:`Invalid` (rule ``"fcm"``) for what FCM refuses in a well-formed message."""
    _one_target(message)
    android, android_v2 = _field(message, "android"), _field(message, "androidV2")
    if android is not None and android_v2 is not None:
        raise _fcm("message", "Message cannot contain both android and android_v2 "
                              "(AndroidConfig and AndroidConfigV2 are mutually exclusive).")
    _data_keys(message.get("data"))
    _analytics_label(_field(message, "fcmOptions"), "message.fcm_options")
    for path, config in (("message.android", android), ("message.android_v2", android_v2),
                         ("message.apns", message.get("apns")),
                         ("message.webpush", message.get("webpush"))):
        if config is not None:
            options = _field(config, "fcmOptions")
            _analytics_label(options, f"{path}.fcm_options")
            if config is android or config is android_v2:
                _ttl(config.get("ttl"), f"{path}.ttl")
            elif path == "message.webpush" and options is not None:
                _https_link(options.get("link"))


def _field(parent: Mapping[str, Any], camel: str) -> Any:
    """A field by either spelling (the schema has refused a message that uses both)."""
    value = parent.get(camel)
    return parent.get(proto_name(camel)) if value is None else value


def _fcm(field: str, description: str) -> Invalid:
    return Invalid(lambda _path: description, "fcm").at(field)


def _one_target(message: Mapping[str, Any]) -> None:
    targets = [name for name in TARGETS if message.get(name) is not None]
    if not targets:
        raise _fcm("message", "Recipient of the message is not set.")
    if len(targets) > 1:
        raise _fcm("message", f"Invalid value at 'message' (oneof), oneof field 'target' is "
                              f"already set. Cannot set '{targets[1]}'")
    topic = message.get("topic")
    if topic is not None and not TOPIC_NAME.fullmatch(topic):
        raise _fcm("message.topic", f"Invalid topic name {_json_text(topic)}: a topic name matches "
                                    '[a-zA-Z0-9-_.~%]{1,900} (no "/topics/" prefix).')


def _data_keys(data: Mapping[str, Any] | None) -> None:
    for index, key in enumerate(data or ()):
        if key in RESERVED_DATA_KEYS or key.startswith(RESERVED_DATA_PREFIXES):
            raise _fcm(f"message.data[{index}].key",
                       f'Invalid data payload key "{key}": a reserved word ("from", '
                       '"message_type", or any key starting with "google." or '
                       '"gcm.notification.").')


def _ttl(ttl: str | None, path: str) -> None:
    match = DURATION.fullmatch(ttl) if ttl is not None else None
    if match is None:
        return
    negative, seconds, nanos = match.groups()
    if negative and (int(seconds) or int(nanos or "0")):
        raise _fcm(path, f"The value provided for {path} is out of range: a time to live must "
                         "not be negative.")
    if int(seconds) > MAX_TTL_S or (int(seconds) == MAX_TTL_S and int(nanos or "0")):
        raise _fcm(path, f"The value provided for {path} is out of range: the maximum time to "
                         f"live is 4 weeks ({MAX_TTL_S}s).")


def _https_link(link: str | None) -> None:
    if link is not None and not link.startswith("https://"):
        raise _fcm("message.webpush.fcm_options.link",
                   f"Invalid value at 'message.webpush.fcm_options.link': {_json_text(link)} is not "
                   "an HTTPS URL (for all URL values, HTTPS is required).")


def _analytics_label(options: Mapping[str, Any] | None, path: str) -> None:
    label = _field(options, "analyticsLabel") if options is not None else None
    if label is not None and not ANALYTICS_LABEL.fullmatch(label):
        raise _fcm(f"{path}.analytics_label",
                   f"Invalid value at '{path}.analytics_label': an analytics label must match "
                   "^[a-zA-Z0-9-_.~%]{1,50}$.")
