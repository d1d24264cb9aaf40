"""A download streamed from a file opened once, before the answer starts.

Opening by path at send time (Starlette's FileResponse) races a prune: the file checked a moment
ago is gone (a 500), or goes between the headers and the body (a body shorter than its
Content-Length). An open file survives its unlinking, so this answer is the whole file, or
the route's 410 when it was already gone. One byte range (`Range: bytes=a-b`, `a-`, `-n`) is
served as 206; a range past the end is 416; anything else gets the whole file.
"""

from __future__ import annotations

import os
import re
from typing import BinaryIO
from urllib.parse import quote

from anyio import to_thread
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

CHUNK_BYTES = 256 * 1024
_RANGE = re.compile(r"^bytes=(\d*)-(\d*)$")


def content_disposition(filename: str) -> str:
    quoted = quote(filename)
    if quoted != filename:
        return f"attachment; filename*=utf-8''{quoted}"
    return f'attachment; filename="{filename}"'


def byte_range(header: str | None, size: int) -> tuple[int, int] | None:
    """(first, last) of one satisfiable range; None for the whole file. ValueError: past the
    end (416)."""
    found = _RANGE.match(header.strip()) if header else None
    if found is None or found[1] == found[2] == "":
        return None
    first, last = found[1], found[2]
    if first == "":  # the last n bytes
        count = int(last)
        if count == 0:
            raise ValueError("an empty suffix range")
        return max(0, size - count), size - 1
    start = int(first)
    end = min(int(last), size - 1) if last else size - 1
    if start >= size:
        raise ValueError("the range starts past the end")
    if end < start:
        return None
    return start, end


class OpenFileResponse(Response):
    def __init__(
        self,
        file: BinaryIO,
        filename: str,
        range_header: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        self.file = file
        size = os.fstat(file.fileno()).st_size
        extra = {
            **(headers or {}),
            "Accept-Ranges": "bytes",
            "Content-Disposition": content_disposition(filename),
        }
        try:
            span = byte_range(range_header, size)
        except ValueError:
            span, self.first, self.length = None, 0, 0
            extra["Content-Range"] = f"bytes */{size}"
            super().__init__(status_code=416, headers=extra)
            return
        if span is None:
            self.first, self.length, code = 0, size, 200
        else:
            self.first, self.length, code = span[0], span[1] - span[0] + 1, 206
            extra["Content-Range"] = f"bytes {span[0]}-{span[1]}/{size}"
        super().__init__(status_code=code, headers=extra, media_type="application/octet-stream")
        self.headers["content-length"] = str(self.length)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await send(
                {
                    "type": "http.response.start",
                    "status": self.status_code,
                    "headers": self.raw_headers,
                }
            )
            if scope.get("method") == "HEAD" or self.status_code == 416:
                await send({"type": "http.response.body", "body": b""})
                return
            position, left = self.first, self.length
            while True:
                chunk = await to_thread.run_sync(
                    os.pread, self.file.fileno(), min(CHUNK_BYTES, left), position
                )
                position += len(chunk)
                left -= len(chunk)
                more = left > 0 and bool(chunk)
                await send({"type": "http.response.body", "body": chunk, "more_body": more})
                if not more:
                    return
        finally:
            self.file.close()
