"""The FCM emulator's OAuth token endpoint verifies the JWT-bearer grant of the service accounts it
was given, and ``messages:send`` then needs one of its access tokens.

The grants come from the libraries Herald relies on (google-auth's service-account credentials,
firebase-admin's ``Certificate``) loading files ``devstack.service_account`` writes; the emulator
runs in this process on a real loopback port, and the libraries' synchronous HTTP runs in a
thread beside it.
"""

from __future__ import annotations

import asyncio
import json
import stat
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import pytest
from aiohttp.test_utils import TestClient, TestServer
from firebase_admin import credentials
from google.auth import crypt, jwt
from google.auth.exceptions import RefreshError
from google.auth.transport.requests import Request
from google.oauth2 import service_account

from devstack.processes import free_port
from devstack.service_account import write_service_account
from fcm_emulator.client import EmulatorClient, GrantRow, Received
from fcm_emulator.server import make_app

FCM_SCOPE = "https://www.googleapis.com/auth/firebase.messaging"
SEND = "/v1/projects/demo/messages:send"
BODY = orjson.dumps({"message": {"token": "device-1", "notification": {"title": "T"}}})
BAD_OAUTH = ("Request had invalid authentication credentials. Expected OAuth 2 access token, login "
             "cookie or other valid authentication credential. See "
             "https://developers.google.com/identity/sign-in/web/devconsole-project.")


@dataclass
class OAuthEmulator:
    client: TestClient[Any, Any]
    account: Path
    token_uri: str

    async def refresh(self, path: Path | None = None,
                      scopes: tuple[str, ...] = (FCM_SCOPE,)) -> str:
        """An access token, the way google-auth's service-account credentials get one."""
        creds = service_account.Credentials.from_service_account_file(  # type: ignore[no-untyped-call]
            str(path or self.account), scopes=list(scopes))
        await asyncio.to_thread(creds.refresh, Request())
        assert isinstance(creds.token, str)
        return creds.token

    async def send(self, access_token: str | None) -> tuple[int, dict[str, Any]]:
        headers = {"Authorization": f"Bearer {access_token}"} if access_token else {}
        response = await self.client.post(SEND, data=BODY, headers=headers)
        return response.status, await response.json()

    async def configure(self, **config: Any) -> dict[str, Any]:
        response = await self.client.post("/_emulator/config", data=orjson.dumps(config))
        assert response.status == 200
        return dict(await response.json())

    async def rows(self) -> list[Received]:
        response = await self.client.get("/_emulator/requests")
        return [Received.from_row(orjson.loads(line))
                for line in (await response.read()).splitlines()]

    async def grants(self) -> list[GrantRow]:
        emulator = EmulatorClient(str(self.client.make_url("")))
        try:
            return await asyncio.to_thread(emulator.grants)
        finally:
            emulator.close()


@pytest.fixture
async def oauth(tmp_path: Path) -> AsyncIterator[OAuthEmulator]:
    port = free_port()
    token_uri = f"http://127.0.0.1:{port}/token"
    account = write_service_account(tmp_path / "sa.json", token_uri=token_uri, project_id="demo")
    async with TestClient(TestServer(make_app([account]), port=port)) as client:
        yield OAuthEmulator(client, account, token_uri)


def signed_grant(account: Path, *, iat_in_s: int = 0, exp_in_s: int = 3600, **claims: Any) -> str:
    """A JWT-bearer assertion signed with ``account``'s key; ``claims`` override the usual ones,
    ``iat`` and ``exp`` are that many seconds from now."""
    info = json.loads(account.read_text())
    now = int(time.time())
    payload = {"iss": info["client_email"], "aud": info["token_uri"], "scope": FCM_SCOPE,
               "iat": now + iat_in_s, "exp": now + exp_in_s, **claims}
    signer = crypt.RSASigner.from_service_account_info(info)  # type: ignore[no-untyped-call]
    return jwt.encode(signer, payload).decode()  # type: ignore[no-untyped-call]


async def post_grant(oauth: OAuthEmulator, assertion: str) -> tuple[int, dict[str, Any]]:
    response = await oauth.client.post("/token", data={
        "grant_type": "urn:ietf:params:oauth:grant-type:jwt-bearer", "assertion": assertion})
    return response.status, await response.json()


# --- the service-account file ----------------------------------------------------------------------
def test_the_service_account_file_is_google_s_format_and_private(tmp_path: Path) -> None:
    path = write_service_account(tmp_path / "sa.json", token_uri="http://127.0.0.1:1/token",
                                 project_id="herald-local")
    info = json.loads(path.read_text())
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert info["type"] == "service_account" and info["project_id"] == "herald-local"
    assert info["client_email"] == "herald-sender@herald-local.iam.gserviceaccount.com"
    assert info["private_key"].startswith("-----BEGIN PRIVATE KEY-----")  # PKCS8
    assert info["universe_domain"] == "googleapis.com" and len(info["private_key_id"]) == 40
    assert {"client_id", "auth_uri", "auth_provider_x509_cert_url", "client_x509_cert_url"} <= set(info)
    other = json.loads(write_service_account(tmp_path / "b.json", token_uri="t",
                                             project_id="p", client_email="x@p.test").read_text())
    assert other["client_email"] == "x@p.test" and other["private_key"] != info["private_key"]


# --- grants that work ------------------------------------------------------------------------------
async def test_google_auth_s_grant_gets_a_token_that_sends(oauth: OAuthEmulator) -> None:
    token = await oauth.refresh()
    status, body = await oauth.send(token)
    assert status == 200 and body["name"].startswith("projects/demo/messages/")
    [row] = await oauth.rows()
    email = json.loads(oauth.account.read_text())["client_email"]
    assert row.authorized_as == email and row.auth_error is None
    [grant] = await oauth.grants()
    assert grant.granted and grant.client_email == email and grant.error is None
    assert grant.expires_at is not None and grant.expires_at > time.time() + 3500


async def test_firebase_admin_s_certificate_gets_a_token_that_sends(oauth: OAuthEmulator) -> None:
    certificate = credentials.Certificate(str(oauth.account))
    access = await asyncio.to_thread(certificate.get_access_token)
    assert (await oauth.send(access.access_token))[0] == 200


async def test_the_cloud_platform_scope_is_enough(oauth: OAuthEmulator) -> None:
    token = await oauth.refresh(scopes=("https://www.googleapis.com/auth/cloud-platform",))
    assert (await oauth.send(token))[0] == 200


# --- sends without a valid token -------------------------------------------------------------------
@pytest.mark.parametrize(("access_token", "why"), [(None, "missing"), ("ya29.forged", "unknown")])
async def test_a_send_without_a_token_of_this_emulator_is_unauthenticated(
        oauth: OAuthEmulator, access_token: str | None, why: str) -> None:
    status, body = await oauth.send(access_token)
    assert status == 401
    assert body == {"error": {"code": 401, "message": BAD_OAUTH, "status": "UNAUTHENTICATED"}}
    [row] = await oauth.rows()
    assert row.auth_error == why and row.error == "UNAUTHENTICATED" and row.authorized_as is None
    assert row.token == "device-1"  # recorded, not delivered


async def test_an_expired_token_is_unauthenticated(oauth: OAuthEmulator) -> None:
    answer = await oauth.configure(token_endpoint={"expires_in_s": 1})
    assert answer["token_endpoint"]["expires_in_s"] == 1
    token = await oauth.refresh()
    assert (await oauth.send(token))[0] == 200
    await asyncio.sleep(1.05)
    assert (await oauth.send(token))[0] == 401
    assert [row.auth_error for row in await oauth.rows()] == [None, "expired"]
    stats = await (await oauth.client.get("/_emulator/stats")).json()
    assert stats["unauthenticated"] == {"expired": 1}


async def test_revoked_tokens_stop_working_and_new_ones_work(oauth: OAuthEmulator) -> None:
    old = await oauth.refresh()
    assert (await oauth.configure(revoke_tokens=True))["revoked_tokens"] == 1
    assert (await oauth.send(old))[0] == 401
    assert (await oauth.send(await oauth.refresh()))[0] == 200
    assert [row.auth_error for row in await oauth.rows()] == ["revoked", None]


async def test_reset_forgets_the_grants_and_keeps_the_tokens_and_the_service_account(
        oauth: OAuthEmulator) -> None:
    old = await oauth.refresh()
    await oauth.client.post("/_emulator/reset")
    assert await oauth.grants() == []
    assert (await oauth.send(old))[0] == 200  # a reset is not a revocation
    assert (await oauth.send(await oauth.refresh()))[0] == 200


# --- grants that are refused -----------------------------------------------------------------------
async def test_a_grant_signed_by_a_key_not_configured_is_refused(oauth: OAuthEmulator,
                                                                tmp_path: Path) -> None:
    stranger = write_service_account(tmp_path / "stranger.json", token_uri=oauth.token_uri,
                                     project_id="demo")
    with pytest.raises(RefreshError, match="invalid_grant"):
        await oauth.refresh(stranger)
    [grant] = await oauth.grants()
    assert not grant.granted and grant.error == "Invalid JWT Signature."


async def test_a_grant_whose_signature_does_not_match_its_key_id_is_refused(
        oauth: OAuthEmulator, tmp_path: Path) -> None:
    info = json.loads(oauth.account.read_text())
    impostor = json.loads(write_service_account(tmp_path / "i.json", token_uri=oauth.token_uri,
                                                project_id="demo").read_text())
    impostor["private_key_id"] = info["private_key_id"]  # claims the configured key, signs with its own
    (tmp_path / "i.json").write_text(json.dumps(impostor))
    status, body = await post_grant(oauth, signed_grant(tmp_path / "i.json"))
    assert status == 400 and body == {"error": "invalid_grant",
                                      "error_description": "Invalid JWT Signature."}


@pytest.mark.parametrize("audience", ["https://oauth2.googleapis.com/token", "the file's"])
async def test_the_audience_is_google_s_token_endpoint_or_the_file_s_token_uri(
        oauth: OAuthEmulator, audience: str) -> None:
    """google-auth signs for Google's endpoint whatever the file's token_uri says."""
    aud = oauth.token_uri if audience == "the file's" else audience
    assert (await post_grant(oauth, signed_grant(oauth.account, aud=aud)))[0] == 200


@pytest.mark.parametrize(("claims", "error"), [
    ({"aud": "https://example.test/token"}, "invalid_grant"),
    ({"aud": "https://accounts.google.com/o/oauth2/auth"}, "invalid_grant"),
    ({"scope": "https://www.googleapis.com/auth/userinfo.email"}, "invalid_scope"),
    ({"scope": ""}, "invalid_scope"),
    ({"iss": "someone@else.iam.gserviceaccount.com"}, "invalid_grant"),
    ({"iat_in_s": -100, "exp_in_s": -10}, "invalid_grant"),  # expired
    ({"exp_in_s": 3601}, "invalid_grant"),  # longer than an hour
    ({"iat_in_s": 600, "exp_in_s": 1200}, "invalid_grant"),  # issued in the future
    ({"exp": "tomorrow"}, "invalid_grant"),
])
async def test_a_grant_with_a_wrong_claim_is_refused(oauth: OAuthEmulator, claims: dict[str, Any],
                                                     error: str) -> None:
    assert (await post_grant(oauth, signed_grant(oauth.account)))[0] == 200  # the usual ones pass
    status, body = await post_grant(oauth, signed_grant(oauth.account, **claims))
    assert status == 400 and body["error"] == error and body["error_description"]
    assert [grant.granted for grant in await oauth.grants()] == [True, False]


@pytest.mark.parametrize("form", [{"grant_type": "client_credentials", "assertion": "x"},
                                  {"grant_type": "urn:ietf:params:oauth:grant-type:jwt-bearer"},
                                  {"grant_type": "urn:ietf:params:oauth:grant-type:jwt-bearer",
                                   "assertion": "not.a-jwt"}])
async def test_a_malformed_grant_request_is_refused(oauth: OAuthEmulator,
                                                    form: dict[str, str]) -> None:
    response = await oauth.client.post("/token", data=form)
    body = await response.json()
    assert response.status == 400 and set(body) == {"error", "error_description"}


# --- the token endpoint's knobs --------------------------------------------------------------------
async def test_refuse_makes_every_grant_invalid(oauth: OAuthEmulator) -> None:
    await oauth.configure(token_endpoint={"refuse": "invalid_grant"})
    with pytest.raises(RefreshError, match="invalid_grant"):
        await oauth.refresh()
    await oauth.configure(token_endpoint={"refuse": None})
    assert (await oauth.send(await oauth.refresh()))[0] == 200
    grants = await oauth.grants()
    assert [grant.granted for grant in grants] == [False, True]
    assert grants[0].client_email == grants[1].client_email  # the refused one is still named
    stats = await (await oauth.client.get("/_emulator/stats")).json()
    assert stats["grants"] == {grants[1].client_email: 1} and stats["grants_refused"] == 1


async def test_stall_holds_each_grant_s_answer(oauth: OAuthEmulator) -> None:
    await oauth.configure(token_endpoint={"stall_s": 0.3})
    started = time.monotonic()
    await oauth.refresh()
    assert time.monotonic() - started >= 0.3


async def test_fail_all_unauthenticated_answers_like_a_bad_token(oauth: OAuthEmulator) -> None:
    token = await oauth.refresh()
    await oauth.configure(fail_all={"error": "UNAUTHENTICATED"})
    status, body = await oauth.send(token)
    assert status == 401 and body["error"]["message"] == BAD_OAUTH
    [row] = await oauth.rows()
    assert row.error == "UNAUTHENTICATED" and row.auth_error is None  # the token itself was fine
