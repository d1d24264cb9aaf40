"""blobs.BlobApiService/StartBlobUpload: a token plus the URL the client PUTs the bytes to."""

from __future__ import annotations

from tests.kaggle_emulator.routes import fields
from tests.kaggle_emulator.routes.fields import Body
from tests.kaggle_emulator.routes.responses import Handler, Reply
from tests.kaggle_emulator.state import CallContext, EmulatorState


def start_blob_upload(state: EmulatorState, ctx: CallContext, body: Body) -> Reply:
    name = fields.required_text(body, "name")
    length = fields.integer(body, "contentLength") or 0
    blob = state.blobs.start(name, length)
    return {"token": blob.token, "createUrl": state.upload_url(ctx.base_url, blob.token)}


ROUTES: dict[tuple[str, str], Handler] = {
    ("blobs.BlobApiService", "StartBlobUpload"): start_blob_upload,
}
