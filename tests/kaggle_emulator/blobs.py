"""Blob uploads: StartBlobUpload hands out a token and an upload URL; the client PUTs the bytes.

The PUT side speaks the resumable-upload protocol KaggleApi uses: a whole body, a
`Content-Range: bytes a-b/N` chunk, or an empty `bytes */N` probe answered with 200 (complete),
308 plus `Range` (partial) or 404 (unknown or expired token).
"""

from __future__ import annotations

import re
import secrets
import threading
from dataclasses import dataclass
from pathlib import Path

from tests.kaggle_emulator.errors import bad_request

_CHUNK = re.compile(r"bytes (\d+)-(\d+)/(\d+)")
_PROBE = re.compile(r"bytes \*/(\d+)")


@dataclass
class Blob:
    token: str
    name: str
    content_length: int
    path: Path
    received: int = 0

    @property
    def complete(self) -> bool:
        return self.received == self.content_length


@dataclass(frozen=True)
class PutResult:
    status: int
    headers: dict[str, str]


class BlobStore:
    def __init__(self, root: Path) -> None:
        self._root = root
        self._root.mkdir(parents=True, exist_ok=True)
        self._blobs: dict[str, Blob] = {}
        self._lock = threading.Lock()

    def start(self, name: str, content_length: int) -> Blob:
        if not name or "/" in name or name in (".", ".."):
            raise bad_request(f"Invalid blob name {name!r}")
        if content_length < 0:
            raise bad_request("contentLength must not be negative")
        token = secrets.token_urlsafe(16)
        blob = Blob(token, name, content_length, self._root / token)
        blob.path.write_bytes(b"")
        with self._lock:
            self._blobs[token] = blob
        return blob

    def started_names(self) -> list[str]:
        """The name of every blob upload started, in order (a file uploaded twice is there
        twice)."""
        with self._lock:
            return [blob.name for blob in self._blobs.values()]

    def put(self, token: str, body: bytes, content_range: str | None) -> PutResult:
        with self._lock:
            blob = self._blobs.get(token)
        if blob is None:
            return PutResult(404, {})
        if content_range and _PROBE.fullmatch(content_range.strip()):
            return self._progress(blob)
        offset = 0
        if content_range and (chunk := _CHUNK.fullmatch(content_range.strip())):
            offset = int(chunk.group(1))
        if offset > blob.received or offset + len(body) > blob.content_length:
            return PutResult(400, {})
        with open(blob.path, "r+b") as f:
            f.seek(offset)
            f.write(body)
            f.truncate()
        blob.received = offset + len(body)
        return self._progress(blob)

    @staticmethod
    def _progress(blob: Blob) -> PutResult:
        if blob.complete:
            return PutResult(200, {})
        if blob.received == 0:
            return PutResult(308, {})
        return PutResult(308, {"Range": f"bytes=0-{blob.received - 1}"})

    def completed(self, token: str | None) -> Blob:
        """The fully uploaded blob for a dataset file's token."""
        with self._lock:
            blob = self._blobs.get(token or "")
        if blob is None or not blob.complete:
            raise bad_request(f"Invalid or incomplete upload token {token!r}")
        return blob
