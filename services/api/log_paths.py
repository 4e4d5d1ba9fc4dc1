"""A request's path as the api's log lines show it: a device's token or a user id in a path is
the app's users' data (``DELETE /v1/devices/{token}``, ``DELETE /v1/users/{user_id}``), and a
log line never carries it."""

from __future__ import annotations

PERSONAL_PREFIXES = ("/v1/devices/", "/v1/users/")
"""Paths whose last segment names a device or a person."""
FIXED = frozenset({"/v1/devices/bulk"})


def loggable(path: str) -> str:
    """``path`` with a token or user id in it replaced by ``…``."""
    if path in FIXED:
        return path
    for prefix in PERSONAL_PREFIXES:
        if path.startswith(prefix):
            return prefix + "…"
    return path
