"""How protobuf-JSON scalar types are written on the wire, in the form kagglesdk parses.

Written by hand on purpose: kagglesdk's own TimeDeltaSerializer drops whole days (it uses
`timedelta.seconds`), so a 30-hour quota serialised with it would read as 6 hours.
"""

from __future__ import annotations

import email.utils
from datetime import UTC, datetime


def duration(seconds: float) -> str:
    """A google.protobuf.Duration: "108000s" or "12.345s"."""
    millis = max(0, round(seconds * 1000))
    whole, frac = divmod(millis, 1000)
    return f"{whole}.{frac:03d}s" if frac else f"{whole}s"


def timestamp(epoch: float) -> str:
    """A google.protobuf.Timestamp: UTC ISO 8601 with milliseconds and a trailing Z."""
    moment = datetime.fromtimestamp(epoch, UTC).replace(tzinfo=None)
    return moment.isoformat(timespec="milliseconds") + "Z"


def http_date(epoch: float) -> str:
    """An RFC 7231 date, as the client parses Last-Modified."""
    return email.utils.formatdate(epoch, usegmt=True)
