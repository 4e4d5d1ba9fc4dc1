"""A local stand-in for Google's OAuth 2.0 token endpoint: the JWT-bearer grant of a service account
(RFC 7523), verified as Google verifies it, and the access tokens it hands out.

google-auth's service-account credentials (and so firebase-admin's) sign a JWT with the account's
private key and post it to the ``token_uri`` of the service-account file::

    grant_type=urn:ietf:params:oauth:grant-type:jwt-bearer&assertion=<header.claims.signature>

The emulator is handed the same file, derives the public key from it, and checks the grant:
an RS256 signature (RSASSA-PKCS1-v1_5 with SHA-256, verified by ``cryptography``) by the key
named by ``kid`` (the file's ``private_key_id``), ``iss`` the file's ``client_email``, ``aud``
Google's token endpoint (what google-auth signs for) or the file's ``token_uri``, a ``scope``
that lets the token send FCM messages, and a short-lived, current ``iat``/``exp``. A grant it
refuses is answered in Google's OAuth error shape (``{"error", "error_description"}``, HTTP 400),
which google-auth raises as ``RefreshError``.
"""

from __future__ import annotations

import base64
import binascii
import secrets
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding, rsa

JWT_BEARER = "urn:ietf:params:oauth:grant-type:jwt-bearer"
FCM_SCOPES = frozenset({"https://www.googleapis.com/auth/firebase.messaging",
                        "https://www.googleapis.com/auth/cloud-platform"})
GOOGLE_TOKEN_URI = "https://oauth2.googleapis.com/token"
"""The audience google-auth signs every service-account grant for, whatever the file's
``token_uri`` (google/oauth2/service_account.py, ``_GOOGLE_OAUTH2_TOKEN_ENDPOINT``): Google's token
endpoint. The emulator accepts it, and the file's ``token_uri``."""
MAX_LIFETIME_S = 3600
CLOCK_SKEW_S = 10.0

# Google's own texts where they are known (the first two and the scope's); the others modelled.
BAD_SIGNATURE = "Invalid JWT Signature."
BAD_TIMES = ("Invalid JWT: Token must be a short-lived token (60 minutes) and in a reasonable "
             "timeframe. Check your iat and exp values in the JWT claim.")
BAD_SCOPE = "Invalid OAuth scope or ID token audience provided."


class GrantRefused(Exception):
    """A grant the endpoint refuses: ``error`` (OAuth error code) and ``description``."""

    def __init__(self, description: str, error: str = "invalid_grant",
                 client_email: str | None = None) -> None:
        super().__init__(description)
        self.error = error
        self.description = description
        self.client_email = client_email

    def body(self) -> dict[str, str]:
        return {"error": self.error, "error_description": self.description}


@dataclass(frozen=True)
class ServiceAccount:
    """What the emulator needs of a service-account file: who it is and its public key."""

    client_email: str
    private_key_id: str
    token_uri: str
    public_key: rsa.RSAPublicKey

    @classmethod
    def from_file(cls, path: Path) -> ServiceAccount:
        info = orjson.loads(path.read_bytes())
        private_key = serialization.load_pem_private_key(info["private_key"].encode(), password=None)
        public_key = private_key.public_key()
        if not isinstance(public_key, rsa.RSAPublicKey):
            raise ValueError(f"{path}: the service account's key is not an RSA key")
        return cls(client_email=info["client_email"], private_key_id=info["private_key_id"],
                   token_uri=info["token_uri"], public_key=public_key)


@dataclass
class AccessToken:
    client_email: str
    expires_at: float
    revoked: bool = False


@dataclass
class Grant:
    """One request to the token endpoint, as ``/_emulator/grants`` lists it."""

    at: float
    client_email: str | None
    granted: bool
    error: str | None
    expires_at: float | None

    def row(self) -> dict[str, Any]:
        return {"at": self.at, "client_email": self.client_email, "granted": self.granted,
                "error": self.error, "expires_at": self.expires_at}


@dataclass
class Authority:
    """The configured service accounts, the access tokens issued to them, and every grant."""

    accounts: dict[str, ServiceAccount] = field(default_factory=dict)  # by private_key_id
    tokens: dict[str, AccessToken] = field(default_factory=dict)
    grants: list[Grant] = field(default_factory=list)

    @classmethod
    def from_files(cls, paths: list[Path]) -> Authority:
        accounts = [ServiceAccount.from_file(path) for path in paths]
        return cls(accounts={account.private_key_id: account for account in accounts})

    @property
    def enabled(self) -> bool:
        """OAuth is on as soon as one service account is configured."""
        return bool(self.accounts)

    def verify(self, grant_type: str | None, assertion: str | None, now: float) -> ServiceAccount:
        """The account whose grant this is; :class:`GrantRefused` if it is not a valid one."""
        if grant_type != JWT_BEARER:
            raise GrantRefused(f"Invalid grant_type: {grant_type or ''}", "unsupported_grant_type")
        if not assertion:
            raise GrantRefused("Missing required parameter: assertion", "invalid_request")
        header, claims, signed, signature = _split(assertion)
        account = self.accounts.get(str(header.get("kid")))
        if header.get("alg") != "RS256" or account is None:
            raise GrantRefused(BAD_SIGNATURE, client_email=_str_or_none(claims.get("iss")))
        try:
            account.public_key.verify(signature, signed, padding.PKCS1v15(), hashes.SHA256())
        except InvalidSignature:
            raise GrantRefused(BAD_SIGNATURE, client_email=account.client_email) from None
        _check_claims(account, claims, now)
        return account

    def issue(self, account: ServiceAccount, expires_in_s: int, now: float) -> str:
        token = "ya29.emulator-" + secrets.token_urlsafe(32)
        self.tokens[token] = AccessToken(account.client_email, now + expires_in_s)
        return token

    def authorize(self, header: str | None, now: float) -> tuple[str | None, str | None]:
        """(client_email, None) for a valid ``Authorization`` header, else (None, why): one of
        ``missing``, ``unknown``, ``expired``, ``revoked``."""
        if not header or not header.startswith("Bearer "):
            return None, "missing"
        token = self.tokens.get(header[7:].strip())
        if token is None:
            return None, "unknown"
        if token.revoked:
            return None, "revoked"
        if now >= token.expires_at:
            return None, "expired"
        return token.client_email, None

    def revoke_all(self) -> int:
        """Every token issued so far stops working; the number revoked."""
        for token in self.tokens.values():
            token.revoked = True
        return len(self.tokens)

    def forget(self) -> None:
        """The record of grants goes; the service accounts and the tokens issued stay valid (a
        reset clears what a test reads, it does not revoke: ``revoke_tokens`` does)."""
        self.grants.clear()


def _split(assertion: str) -> tuple[dict[str, Any], dict[str, Any], bytes, bytes]:
    """(header, claims, signed part, signature) of a compact JWT; refused if it is not one."""
    parts = assertion.encode().split(b".")
    if len(parts) != 3:
        raise GrantRefused("Invalid JWT: the assertion is not a compact JWS (header.claims.signature).")
    try:
        header, claims = (orjson.loads(_b64decode(part)) for part in parts[:2])
        signature = _b64decode(parts[2])
    except (binascii.Error, orjson.JSONDecodeError, ValueError) as exc:
        raise GrantRefused(f"Invalid JWT: cannot decode the assertion ({exc}).") from None
    if not isinstance(header, dict) or not isinstance(claims, dict):
        raise GrantRefused("Invalid JWT: header and claims must be JSON objects.")
    return header, claims, parts[0] + b"." + parts[1], signature


def _b64decode(part: bytes) -> bytes:
    return base64.urlsafe_b64decode(part + b"=" * (-len(part) % 4))


def _check_claims(account: ServiceAccount, claims: dict[str, Any], now: float) -> None:
    email = account.client_email
    if claims.get("iss") != email:
        raise GrantRefused(f"Invalid JWT: the issuer {claims.get('iss')!r} is not the key's "
                           f"service account {email}.", client_email=email)
    if claims.get("aud") not in (GOOGLE_TOKEN_URI, account.token_uri):
        raise GrantRefused(f"Invalid JWT: Failed audience check. The expected audience is "
                           f"{GOOGLE_TOKEN_URI}.", client_email=email)
    scopes = str(claims.get("scope", "")).split()
    if not FCM_SCOPES.intersection(scopes):
        raise GrantRefused(BAD_SCOPE, "invalid_scope", client_email=email)
    issued, expires = claims.get("iat"), claims.get("exp")
    if not (isinstance(issued, int | float) and isinstance(expires, int | float)
            and issued <= now + CLOCK_SKEW_S and expires > now
            and expires - issued <= MAX_LIFETIME_S):
        raise GrantRefused(BAD_TIMES, client_email=email)


def _str_or_none(value: Any) -> str | None:
    return value if isinstance(value, str) else None
