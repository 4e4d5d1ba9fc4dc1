"""firebase-admin, the official SDK, pointed at the FCM emulator with no Google credentials: the
baseline both ``bench.transport`` and ``bench.pipeline`` measure Herald against."""

from __future__ import annotations

import uuid

import firebase_admin
from firebase_admin import credentials, messaging
from google.oauth2 import credentials as oauth2

STATIC_ACCESS_TOKEN = "bench-access-token"


class StaticCredential(credentials.Base):  # type: ignore[misc]  # firebase_admin has no stubs
    """A credential that needs no network: a fixed bearer token, as a service account would mint.

    The SDK still runs its whole auth flow per request (validity check, header applied).
    """

    def __init__(self) -> None:
        self._credential = oauth2.Credentials(token=STATIC_ACCESS_TOKEN)  # type: ignore[no-untyped-call]

    def get_credential(self) -> oauth2.Credentials:
        return self._credential


def open_app(endpoint: str, project_id: str, name_prefix: str) -> firebase_admin.App:
    """A firebase-admin app of its own that sends to ``endpoint`` instead of Google.

    The SDK has no endpoint setting: its messaging service formats this class constant when it is
    created (on first send), so the patch reaches every app of this process: fine in a bench
    process, which sends nowhere else.
    """
    messaging._MessagingService.FCM_URL = f"{endpoint}/v1/projects/{{0}}/messages:send"
    return firebase_admin.initialize_app(StaticCredential(), {"projectId": project_id},
                                         name=f"{name_prefix}-{uuid.uuid4().hex}")


async def close_app(app: firebase_admin.App) -> None:
    """Close the app's HTTP client. ``firebase_admin.delete_app()`` would close it with
    ``asyncio.run()``, which cannot run inside a running loop."""
    service = messaging._get_messaging_service(app)
    await service._async_client.aclose()
