"""SQLAlchemy models: users and their tokens, jobs, segments, checkpoints, events."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, ClassVar

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    UniqueConstraint,
    false,
)
from sqlalchemy.engine import Dialect
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column
from sqlalchemy.types import TypeDecorator

from orchestrator.clock import utcnow as utcnow  # re-exported: most callers take it from here


class UtcDateTime(TypeDecorator[datetime]):
    """Every time column: aware UTC in, aware UTC out, on both databases.

    PostgreSQL keeps the zone (`timestamptz`); SQLite keeps none and hands back naive values,
    which are UTC because nothing else is ever written. A naive value is refused on the way in:
    it is a bug (a clock that is not orchestrator.clock's), not a time to guess the zone of.
    """

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError(f"naive datetime {value.isoformat()} for a UTC column")
        return value.astimezone(UTC)

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None or value.tzinfo is UTC:  # PostgreSQL's, as make_engine sets its zone
            return value
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


class Base(DeclarativeBase):
    type_annotation_map: ClassVar[dict[Any, Any]] = {
        dict[str, Any]: JSON,
        list[Any]: JSON,
        datetime: UtcDateTime,
    }


class User(Base):
    __tablename__ = "users"

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    name: Mapped[str] = mapped_column(String(64), unique=True)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class ApiToken(Base):
    __tablename__ = "api_tokens"

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    user_id: Mapped[str] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), index=True)
    name: Mapped[str] = mapped_column(String(64))
    # sha256 of the token: the token itself is never stored.
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    expires_at: Mapped[datetime | None] = mapped_column()
    # Updated at most once a minute (orchestrator/auth.py), so reads stay reads.
    last_used_at: Mapped[datetime | None] = mapped_column()
    # The admin token made at start-up from BATON_ADMIN_TOKEN or the token file: replaced,
    # not kept, when that changes.
    bootstrap: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())


class UiSession(Base):
    """A status page sign-in: the cookie holds a random secret, this row its sha256. Signing
    out deletes the row, and revoking the API token used to sign in deletes it too (cascade)."""

    __tablename__ = "ui_sessions"

    id_hash: Mapped[str] = mapped_column(String(64), primary_key=True)
    token_id: Mapped[str] = mapped_column(
        ForeignKey("api_tokens.id", ondelete="CASCADE"), index=True
    )
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    expires_at: Mapped[datetime] = mapped_column()


class Job(Base):
    __tablename__ = "jobs"
    # The job list pages newest first per user, by (created_at, id) (migration 0007).
    __table_args__ = (Index("ix_jobs_user_created_id", "user_id", "created_at", "id"),)

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    user_id: Mapped[str] = mapped_column(ForeignKey("users.id"), index=True)
    name: Mapped[str] = mapped_column(String(128))
    backend: Mapped[str] = mapped_column(String(32))
    state: Mapped[str] = mapped_column(String(16), index=True)
    spec: Mapped[dict[str, Any]] = mapped_column(JSON)
    total_steps: Mapped[int] = mapped_column(Integer)
    steps_done: Mapped[int] = mapped_column(Integer, default=0)
    failures: Mapped[int] = mapped_column(Integer, default=0)
    pause_requested: Mapped[bool] = mapped_column(Boolean, default=False)
    wait_until: Mapped[datetime | None] = mapped_column()
    reason: Mapped[str | None] = mapped_column(Text)
    # Why a queued job is not launched yet (no free slot, backing off), shown to the user.
    queue_reason: Mapped[str | None] = mapped_column(Text)
    # The admission pool its sessions take a place in (Backend.slot.key), once known.
    slot_key: Mapped[str | None] = mapped_column(String(160), index=True)
    # The per-job claim: only the owner of an unexpired lease drives the job.
    claim_owner: Mapped[str | None] = mapped_column(String(96))
    claim_expires_at: Mapped[datetime | None] = mapped_column()
    # Backoff is state: nothing looks at the job again before this (None: due now).
    next_attempt_at: Mapped[datetime | None] = mapped_column(index=True)
    # Consecutive transient backend errors, the exponent of the backoff.
    transient_errors: Mapped[int] = mapped_column(Integer, default=0)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow)
    started_at: Mapped[datetime | None] = mapped_column()
    finished_at: Mapped[datetime | None] = mapped_column()


class Segment(Base):
    __tablename__ = "segments"
    __table_args__ = (UniqueConstraint("job_id", "index"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    job_id: Mapped[str] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), index=True)
    index: Mapped[int] = mapped_column(Integer)
    state: Mapped[str] = mapped_column(String(16), index=True)
    # Recorded before the backend is asked to launch, so a crash can never launch it twice.
    launch_id: Mapped[str] = mapped_column(String(64), unique=True)
    handle: Mapped[str | None] = mapped_column(Text)
    slot_key: Mapped[str | None] = mapped_column(String(160), index=True)
    start_step: Mapped[int] = mapped_column(Integer)
    end_step: Mapped[int | None] = mapped_column(Integer)
    outcome: Mapped[str | None] = mapped_column(String(16))
    limit_seconds: Mapped[float] = mapped_column(Float)
    # The SegmentSpec sent to the session, kept so a crashed launch can be retried exactly.
    launch_spec: Mapped[dict[str, Any]] = mapped_column(JSON)
    stop_requested: Mapped[bool] = mapped_column(Boolean, default=False)
    timings: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    metrics: Mapped[list[Any] | None] = mapped_column(JSON)
    # The latest heartbeat of the running session (Backend.progress), if the backend has one.
    progress: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    error: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    launched_at: Mapped[datetime | None] = mapped_column()
    ended_at: Mapped[datetime | None] = mapped_column()


class Checkpoint(Base):
    __tablename__ = "checkpoints"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    job_id: Mapped[str] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), index=True)
    segment_index: Mapped[int] = mapped_column(Integer)
    step: Mapped[int] = mapped_column(Integer)
    location: Mapped[str] = mapped_column(String(1024))
    model_digest: Mapped[str] = mapped_column(String(64))
    bytes: Mapped[int] = mapped_column(BigInteger)
    manifest: Mapped[dict[str, Any]] = mapped_column(JSON)
    # Why this checkpoint failed verification; a rejected checkpoint is never resumed from.
    rejected: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class Event(Base):
    __tablename__ = "events"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    job_id: Mapped[str] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), index=True)
    segment_index: Mapped[int | None] = mapped_column(Integer)
    kind: Mapped[str] = mapped_column(String(32))
    from_state: Mapped[str | None] = mapped_column(String(16))
    to_state: Mapped[str | None] = mapped_column(String(16))
    message: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class KaggleCredential(Base):
    __tablename__ = "kaggle_credentials"

    user_id: Mapped[str] = mapped_column(
        ForeignKey("users.id", ondelete="CASCADE"), primary_key=True
    )
    username: Mapped[str] = mapped_column(String(64))
    # A Fernet token from SecretBox: the API key itself is never stored.
    key_ciphertext: Mapped[str] = mapped_column(String(1024))
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow)


class Notification(Base):
    """The outbox: one webhook POST to make for one event; the notifier retries it with backoff."""

    __tablename__ = "notifications"
    __table_args__ = (UniqueConstraint("event_id", "hook_index"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    job_id: Mapped[str] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), index=True)
    event_id: Mapped[int] = mapped_column(ForeignKey("events.id", ondelete="CASCADE"))
    hook_index: Mapped[int] = mapped_column(Integer)  # which of the spec's webhooks
    state: Mapped[str] = mapped_column(String(16), index=True)  # pending, delivered, failed
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    next_attempt_at: Mapped[datetime] = mapped_column(index=True)
    last_error: Mapped[str | None] = mapped_column(String(500))
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    delivered_at: Mapped[datetime | None] = mapped_column()


class NotificationCursor(Base):
    """How far the notifier has read the events table (one row, id 1)."""

    __tablename__ = "notification_cursor"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    last_event_id: Mapped[int] = mapped_column(Integer, default=0)
