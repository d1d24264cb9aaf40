"""Webhook notifications, the pure part: the spec's `notify` block, which events notify, the
message, the retry schedule, where a webhook may point, and how a URL is shown (never in full:
it is a secret).
"""

from __future__ import annotations

import ipaddress
import re
from typing import Any
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, field_validator

MAX_WEBHOOKS = 5
MAX_ATTEMPTS = 15
FIRST_RETRY_SECONDS = 2.0
MAX_RETRY_SECONDS = 600.0
JOB_STATES_THAT_NOTIFY = frozenset({"succeeded", "failed", "cancelled", "waiting"})
MAX_URL_CHARS = 2000
# RFC 3986's characters (unreserved, reserved, and % for escapes): no space, no control character.
_URI = re.compile(r"[A-Za-z0-9\-._~:/?#\[\]@!$&'()*+,;=%]+")
_BAD_ESCAPE = re.compile(r"%(?![0-9A-Fa-f]{2})")
# The messages never quote the URL: it is a secret.
URL_RULE = (
    f"each webhook must be an http(s) URL of at most {MAX_URL_CHARS} characters, as RFC 3986 "
    "writes it (no spaces or control characters; a numeric port)"
)

Network = ipaddress.IPv4Network | ipaddress.IPv6Network
Networks = tuple[Network, ...]


def check_url(url: str) -> None:
    """Raise ValueError (without quoting the URL) unless it is an http(s) RFC 3986 URL."""
    if len(url) > MAX_URL_CHARS or not _URI.fullmatch(url) or _BAD_ESCAPE.search(url):
        raise ValueError(URL_RULE)
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(URL_RULE)
    try:
        port = parts.port
    except ValueError:
        raise ValueError(URL_RULE) from None
    if port == 0:
        raise ValueError(URL_RULE)


def parse_networks(text: str) -> Networks:
    """`127.0.0.0/8,10.0.0.0/8` (BATON_WEBHOOK_ALLOWED_NETWORKS) as networks."""
    return tuple(
        ipaddress.ip_network(part.strip(), strict=False) for part in text.split(",") if part.strip()
    )


def destination_allowed(address: str, allowed: Networks) -> bool:
    """Public addresses, and those in the networks the operator allowed; nothing else."""
    ip = ipaddress.ip_address(address)
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return any(ip in network for network in allowed) or ip.is_global


def literal_address(url: str) -> str | None:
    """The URL's host when it is an IP address (checked at submit), else None (a name)."""
    host = urlsplit(url).hostname or ""
    try:
        return str(ipaddress.ip_address(host))
    except ValueError:
        return None


class NotifySpec(BaseModel):
    """`notify: {webhooks: [URL, ...]}`: each URL gets a JSON POST on the job's big moments."""

    model_config = ConfigDict(extra="forbid")

    webhooks: list[str] = Field(min_length=1, max_length=MAX_WEBHOOKS)

    @field_validator("webhooks")
    @classmethod
    def _http_urls(cls, urls: list[str]) -> list[str]:
        for url in urls:
            check_url(url)
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


def notifies(
    kind: str, segment_index: int | None, from_state: str | None, to_state: str | None
) -> bool:
    """Job succeeded, failed, was cancelled or went waiting for quota; or a segment failed."""
    if segment_index is None:
        return to_state in JOB_STATES_THAT_NOTIFY and from_state != to_state
    return kind == "segment_failed"


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
