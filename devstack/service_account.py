"""Service-account files for a local OAuth token endpoint (the FCM emulator's ``/token``).

A file in Google's service-account JSON format, with a fresh RSA key of its own: google-auth and
firebase-admin load it as they load one that Google issued, sign their JWT-bearer grants with
its key and send them to its ``token_uri``; the emulator, given the same file, verifies them.
"""

from __future__ import annotations

import json
import os
import secrets
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

KEY_BITS = 2048
GOOGLE_CERTS_URL = "https://www.googleapis.com/oauth2/v1/certs"
ROBOT_CERTS_URL = "https://www.googleapis.com/robot/v1/metadata/x509/"


def write_service_account(path: Path, *, token_uri: str, project_id: str,
                          client_email: str | None = None) -> Path:
    """Write a service-account file with a new RSA-2048 key to ``path`` (mode 0600); ``path``.

    ``client_email`` defaults to ``herald-sender@<project_id>.iam.gserviceaccount.com``.
    """
    email = client_email or f"herald-sender@{project_id}.iam.gserviceaccount.com"
    key = rsa.generate_private_key(public_exponent=65537, key_size=KEY_BITS)
    private_key = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                    serialization.NoEncryption()).decode()
    info = {
        "type": "service_account",
        "project_id": project_id,
        "private_key_id": secrets.token_hex(20),
        "private_key": private_key,
        "client_email": email,
        "client_id": str(secrets.randbelow(10**21)).zfill(21),
        "auth_uri": "https://accounts.google.com/o/oauth2/auth",
        "token_uri": token_uri,
        "auth_provider_x509_cert_url": GOOGLE_CERTS_URL,
        "client_x509_cert_url": ROBOT_CERTS_URL + email.replace("@", "%40"),
        "universe_domain": "googleapis.com",
    }
    # Created 0600 from the start: the private key is never readable by others, even briefly.
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w", encoding="utf-8") as file:
        json.dump(info, file, indent=2)
        file.write("\n")
    path.chmod(0o600)  # an existing file keeps its mode through O_CREAT
    return path
