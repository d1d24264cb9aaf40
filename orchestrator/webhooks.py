"""Webhook notifications, the pure part: the spec's `notify` block, which events notify, the
message, the retry schedule, and how a URL is shown (never in full: it is a secret).
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, field_validator

MAX_WEBHOOKS = 5
MAX_ATTEMPTS = 15
FIRST_RETRY_SECONDS = 2.0
MAX_RETRY_SECONDS = 600.0
JOB_STATES_THAT_NOTIFY = frozenset({"succeeded", "failed", "cancelled", "waiting"})


class NotifySpec(BaseModel):
    """`notify: {webhooks: [URL, ...]}`: each URL gets a JSON POST on the job's big moments."""

    model_config = ConfigDict(extra="forbid")

    webhooks: list[str] = Field(min_length=1, max_length=MAX_WEBHOOKS)

    @field_validator("webhooks")
    @classmethod
    def _http_urls(cls, urls: list[str]) -> list[str]:
        for url in urls:
            parts = urlsplit(url)
            if parts.scheme not in ("http", "https") or not parts.hostname or len(url) > 2000:
                # The message must not quote the URL: it is a secret.
                raise ValueError("each webhook must be an http(s) URL of at most 2000 characters")
        return urls


def redact_url(url: str) -> str:
    """What may be shown of a webhook URL: scheme and host only (the path holds the secret)."""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.hostname}/…" if parts.hostname else "(webhook)"


def redact_spec(spec: dict[str, Any]) -> dict[str, Any]:
    """The spec as it may be returned: webhook URLs redacted."""
    notify = spec.get("notify")
    if not isinstance(notify, dict) or not isinstance(notify.get("webhooks"), list):
        return spec
    hooks = [redact_url(url) if isinstance(url, str) else "(webhook)" for url in notify["webhooks"]]
    return {**spec, "notify": {**notify, "webhooks": hooks}}


def webhooks_of(spec: dict[str, Any]) -> list[str]:
    notify = spec.get("notify")
    if not isinstance(notify, dict):
        return []
    return [url for url in notify.get("webhooks") or [] if isinstance(url, str)]


# A running segment's heartbeat went older than its hang bound (engine/watch.py records it once).
STALLED_EVENT = "stalled"


def notifies(
    kind: str, segment_index: int | None, from_state: str | None, to_state: str | None
) -> bool:
    """Job succeeded, failed, was cancelled or went waiting for quota; or a segment failed or
    stalled (its heartbeat stopped)."""
    if segment_index is None:
        return to_state in JOB_STATES_THAT_NOTIFY and from_state != to_state
    return kind in ("segment_failed", STALLED_EVENT)


def message(
    job_id: str,
    job_name: str,
    kind: str,
    segment_index: int | None,
    to_state: str | None,
    detail: str | None,
    page_url: str | None = None,
) -> dict[str, Any]:
    """The POST body: Baton's fields, plus `text` (Slack) and `content` (Discord)."""
    if segment_index is None:
        what = "is waiting for quota" if to_state == "waiting" else str(to_state)
        text = f"Baton job {job_name} ({job_id}) {what}"
    else:
        text = f"Baton job {job_name} ({job_id}): segment {segment_index} failed"
    if detail:
        text += f": {detail[:300]}"
    if page_url:
        text += f" {page_url}"
    return {
        "text": text,
        "content": text[:2000],
        "job_id": job_id,
        "job_name": job_name,
        "event": kind,
        "state": to_state,
        "segment_index": segment_index,
        "detail": detail,
    }


def retry_delay(attempts: int) -> float:
    """Seconds before the next try after `attempts` failed ones: doubling, capped."""
    return float(min(MAX_RETRY_SECONDS, FIRST_RETRY_SECONDS * 2 ** max(0, attempts - 1)))
