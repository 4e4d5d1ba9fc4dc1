"""Helpers of the integration tests: a client of the in-process api, a key minted through it, a
vhost's name from its URL. Fixtures (``conftest.py``) and test modules import them from here."""

from __future__ import annotations

from typing import Any
from urllib.parse import unquote, urlsplit

import httpx
from fastapi import FastAPI

from herald.domain.access import Role


def client_of(app: FastAPI, key: str | None) -> httpx.AsyncClient:
    """A client of the in-process ``app`` that carries ``key`` (none: no Authorization)."""
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://herald",
                             headers=headers)


def vhost_name(url: str) -> str:
    return unquote(urlsplit(url).path.lstrip("/"))


async def mint(api: httpx.AsyncClient, role: Role | str, name: str | None = None,
               **fields: Any) -> str:
    response = await api.post("/v1/api-keys",
                              json={"name": name or f"test-{role}", "role": str(role), **fields})
    assert response.status_code == 201, response.text
    return str(response.json()["secret"])
