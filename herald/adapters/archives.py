"""Where archives of finished campaigns go (``HERALD_ARCHIVE_URL``): a directory
(``file:///dir``) or an S3-compatible bucket (``s3://bucket/prefix``).

Both store a file whole or not at all: a directory gets a hidden temporary file, synced, then
renamed; a bucket gets the object when its upload completes. Both read a file back whole to
hash it, so the checksum the campaign keeps is of what the target holds, not of what Herald
meant to send, and stream it back (``get``) to rewrite it without people erased since. Every
blocking call (the disk, boto3) runs in a worker thread: the api's event
loop keeps serving while a campaign of a million lines is archived.

S3 through boto3, with its usual configuration (``AWS_ACCESS_KEY_ID``,
``AWS_SECRET_ACCESS_KEY``, ``AWS_DEFAULT_REGION``, a profile or an instance role), and
``HERALD_ARCHIVE_S3_ENDPOINT_URL`` for an S3-compatible server (MinIO, Ceph, moto's server in
the tests).
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import IO, Any

from herald.domain.archive import ArchiveScheme, ArchiveUrl, parse_archive_url
from herald.settings import Settings

READ_BYTES = 1 << 20


def archive_target(settings: Settings) -> DirectoryArchive | S3Archive | None:
    """The target ``HERALD_ARCHIVE_URL`` names; None without one."""
    if settings.archive_url is None:
        return None
    url = parse_archive_url(settings.archive_url)
    if url.scheme is ArchiveScheme.FILE:
        return DirectoryArchive(url)
    return S3Archive(url, settings.archive_s3_endpoint_url)


def _hash_file(file: IO[bytes]) -> str:
    digest = hashlib.sha256()
    while block := file.read(READ_BYTES):
        digest.update(block)
    return digest.hexdigest()


async def _spool(blocks: AsyncIterator[bytes], file: IO[bytes]) -> None:
    async for block in blocks:
        await asyncio.to_thread(file.write, block)
    await asyncio.to_thread(file.flush)


class DirectoryArchive:
    def __init__(self, url: ArchiveUrl) -> None:
        self._url = url
        self._root = Path(url.root)

    def location(self, name: str) -> str:
        return self._url.location(name)

    async def put(self, name: str, blocks: AsyncIterator[bytes]) -> None:
        await asyncio.to_thread(self._root.mkdir, parents=True, exist_ok=True)
        partial = self._root / f".{name}.{os.getpid()}.partial"
        file = await asyncio.to_thread(partial.open, "wb")
        try:
            await _spool(blocks, file)
            await asyncio.to_thread(os.fsync, file.fileno())
        except BaseException:
            file.close()
            partial.unlink(missing_ok=True)
            raise
        file.close()
        await asyncio.to_thread(os.replace, partial, self._root / name)

    async def sha256(self, name: str) -> str | None:
        return await asyncio.to_thread(self._read_sha256, self._root / name)

    async def get(self, name: str) -> AsyncIterator[bytes]:
        file = await asyncio.to_thread((self._root / name).open, "rb")
        try:
            while block := await asyncio.to_thread(file.read, READ_BYTES):
                yield block
        finally:
            file.close()

    @staticmethod
    def _read_sha256(path: Path) -> str | None:
        try:
            with path.open("rb") as file:
                return _hash_file(file)
        except FileNotFoundError:
            return None


class S3Archive:
    def __init__(self, url: ArchiveUrl, endpoint_url: str | None) -> None:
        self._url = url
        self._endpoint_url = endpoint_url
        self._client: Any = None

    def location(self, name: str) -> str:
        return self._url.location(name)

    async def _s3(self) -> Any:
        """boto3's client, made once in a thread (it loads its service models from disk)."""
        if self._client is None:
            self._client = await asyncio.to_thread(self._new_client)
        return self._client

    def _new_client(self) -> Any:
        import boto3

        return boto3.client("s3", endpoint_url=self._endpoint_url)

    async def put(self, name: str, blocks: AsyncIterator[bytes]) -> None:
        client = await self._s3()
        with tempfile.TemporaryFile() as spooled:
            await _spool(blocks, spooled)
            spooled.seek(0)
            await asyncio.to_thread(client.upload_fileobj, spooled, self._url.root,
                                    self._url.key(name),
                                    ExtraArgs={"ContentType": "application/gzip"})

    async def sha256(self, name: str) -> str | None:
        client = await self._s3()
        return await asyncio.to_thread(self._read_sha256, client, self._url.key(name))

    async def get(self, name: str) -> AsyncIterator[bytes]:
        client = await self._s3()
        answer = await asyncio.to_thread(client.get_object, Bucket=self._url.root,
                                         Key=self._url.key(name))
        body = answer["Body"]
        try:
            while block := await asyncio.to_thread(body.read, READ_BYTES):
                yield block
        finally:
            body.close()

    def _read_sha256(self, client: Any, key: str) -> str | None:
        try:
            answer = client.get_object(Bucket=self._url.root, Key=key)
        except client.exceptions.NoSuchKey:
            return None
        body = answer["Body"]
        try:
            return _hash_file(body)
        finally:
            body.close()
