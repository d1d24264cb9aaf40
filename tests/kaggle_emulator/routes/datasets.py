"""datasets.DatasetApiService: create, new version, status, get, list files, download."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from tests.kaggle_emulator import wire
from tests.kaggle_emulator.blobs import Blob
from tests.kaggle_emulator.datasets import (
    Dataset,
    DatasetExistsError,
    DatasetVersion,
    TooManyFiles,
)
from tests.kaggle_emulator.errors import bad_request, forbidden, not_found
from tests.kaggle_emulator.paging import page
from tests.kaggle_emulator.routes import fields
from tests.kaggle_emulator.routes.fields import Body
from tests.kaggle_emulator.routes.responses import Handler, Redirect, Reply
from tests.kaggle_emulator.state import CallContext, EmulatorState

SERVICE = "datasets.DatasetApiService"


def _blobs(state: EmulatorState, body: Body) -> list[Blob]:
    return [state.blobs.completed(fields.text(f, "token")) for f in fields.objects(body, "files")]


def _created(ctx: CallContext, dataset: Dataset) -> Reply:
    return {"ref": dataset.ref, "url": f"{ctx.base_url}/datasets/{dataset.ref}", "status": "Ok"}


def create_dataset(state: EmulatorState, ctx: CallContext, body: Body) -> Reply:
    owner = fields.text(body, "ownerSlug") or ctx.user
    slug = fields.required_text(body, "slug")
    if owner != ctx.user:
        return {"status": "Error", "error": f"You cannot create datasets for {owner}"}
    dataset = Dataset(
        id=0,
        owner=owner,
        slug=slug,
        title=fields.text(body, "title") or slug,
        is_private=bool(fields.flag(body, "isPrivate")),
        license_name=fields.text(body, "licenseName"),
        subtitle=fields.text(body, "subtitle"),
        description=fields.text(body, "description"),
    )
    blobs = _blobs(state, body)
    try:
        state.datasets.create(dataset, blobs, ctx.now)
    except DatasetExistsError:
        return {"status": "Error", "error": f"The dataset {owner}/{slug} already exists"}
    except TooManyFiles as exc:
        return {"status": "Error", "error": str(exc)}
    return _created(ctx, dataset)


def _new_version(
    state: EmulatorState, ctx: CallContext, owner: str, slug: str, body: Body
) -> Reply:
    version_body = fields.obj(body, "body")
    blobs = _blobs(state, version_body)
    notes = fields.text(version_body, "versionNotes")
    try:
        state.datasets.add_version(owner, slug, ctx.user, blobs, notes, ctx.now)
    except TooManyFiles as exc:
        return {"status": "Error", "error": str(exc)}
    return _created(ctx, state.datasets.get(owner, slug, ctx.user, ctx.now))


def create_dataset_version(state: EmulatorState, ctx: CallContext, body: Body) -> Reply:
    owner = fields.required_text(body, "ownerSlug")
    slug = fields.required_text(body, "datasetSlug")
    return _new_version(state, ctx, owner, slug, body)


def create_dataset_version_by_id(state: EmulatorState, ctx: CallContext, body: Body) -> Reply:
    wanted = fields.integer(body, "id")
    dataset = next((d for d in state.datasets.all() if d.id == wanted), None)
    if dataset is None:
        raise not_found(f"Dataset {wanted}")
    return _new_version(state, ctx, dataset.owner, dataset.slug, body)


def _dataset(state: EmulatorState, ctx: CallContext, body: Body) -> Dataset:
    owner = fields.required_text(body, "ownerSlug")
    slug = fields.required_text(body, "datasetSlug")
    return state.datasets.get(owner, slug, ctx.user, ctx.now)


def get_dataset_status(state: EmulatorState, ctx: CallContext, body: Body) -> Reply:
    dataset = _dataset(state, ctx, body)
    return {"status": dataset.visible_versions(ctx.now)[-1].status(ctx.now)}


def _version_entry(version: DatasetVersion, now: float) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "versionNumber": version.number,
        "creationDate": wire.timestamp(version.created_at),
        "status": version.status(now),
    }
    if version.notes:
        entry["versionNotes"] = version.notes
    return entry


def get_dataset(state: EmulatorState, ctx: CallContext, body: Body) -> Reply:
    dataset = _dataset(state, ctx, body)
    versions = dataset.visible_versions(ctx.now)
    reply: dict[str, Any] = {
        "id": dataset.id,
        "ref": dataset.ref,
        "title": dataset.title,
        "url": f"{ctx.base_url}/datasets/{dataset.ref}",
        "ownerName": dataset.owner,
        "ownerRef": dataset.owner,
        "creatorName": dataset.owner,
        "isPrivate": dataset.is_private,
        "currentVersionNumber": versions[-1].number,
        "lastUpdated": wire.timestamp(versions[-1].created_at),
        "totalBytes": sum(size for _, size in versions[-1].files()),
        "versions": [_version_entry(v, ctx.now) for v in reversed(versions)],
    }
    for key, value in (
        ("licenseName", dataset.license_name),
        ("subtitle", dataset.subtitle),
        ("description", dataset.description),
    ):
        if value:
            reply[key] = value
    return reply


def _ready_version(state: EmulatorState, ctx: CallContext, body: Body) -> DatasetVersion:
    dataset = _dataset(state, ctx, body)
    number = fields.integer(body, "datasetVersionNumber")
    return state.datasets.version(dataset.owner, dataset.slug, number, ctx.user, ctx.now)


def list_dataset_files(state: EmulatorState, ctx: CallContext, body: Body) -> Reply:
    dataset = _dataset(state, ctx, body)
    version = _ready_version(state, ctx, body)
    items, next_token = page(
        version.files(),
        fields.integer(body, "pageSize"),
        fields.text(body, "pageToken"),
        state.options.dataset_files_page_size,
    )
    reply: dict[str, Any] = {
        "datasetFiles": [
            {
                "ref": f"{dataset.ref}/{path}",
                "datasetRef": dataset.ref,
                "ownerRef": dataset.owner,
                "name": path,
                "creationDate": wire.timestamp(version.created_at),
                "totalBytes": size,
            }
            for path, size in items
        ]
    }
    if next_token:
        reply["nextPageToken"] = next_token
    return reply


def download_dataset(state: EmulatorState, ctx: CallContext, body: Body) -> Reply:
    dataset = _dataset(state, ctx, body)
    version = _ready_version(state, ctx, body)
    where = (dataset.owner, dataset.slug, str(version.number))
    file_name = fields.text(body, "fileName")
    if not file_name:
        return Redirect(state.file_url(ctx.base_url, "datasets", *where, "archive.zip"))
    if file_name not in {path for path, _ in version.files()}:
        raise bad_request(f"File {file_name!r} is not in {dataset.ref} version {version.number}")
    return Redirect(state.file_url(ctx.base_url, "datasets", *where, "files", quote(file_name)))


def delete_dataset(state: EmulatorState, ctx: CallContext, body: Body) -> Reply:
    dataset = _dataset(state, ctx, body)
    if dataset.owner != ctx.user:
        raise forbidden(f"Permission 'datasets.delete' was denied for {dataset.ref}")
    state.datasets.delete(dataset.ref)
    return {}


ROUTES: dict[tuple[str, str], Handler] = {
    (SERVICE, "DeleteDataset"): delete_dataset,
    (SERVICE, "CreateDataset"): create_dataset,
    (SERVICE, "CreateDatasetVersion"): create_dataset_version,
    (SERVICE, "CreateDatasetVersionById"): create_dataset_version_by_id,
    (SERVICE, "GetDatasetStatus"): get_dataset_status,
    (SERVICE, "GetDataset"): get_dataset,
    (SERVICE, "ListDatasetFiles"): list_dataset_files,
    (SERVICE, "DownloadDataset"): download_dataset,
}
