"""engine: per-job claim, backoff, admission slots, live progress, rejected checkpoints, long texts

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-22 07:30:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_TZ = sa.DateTime(timezone=True)


def upgrade() -> None:
    with op.batch_alter_table("jobs") as jobs:
        jobs.alter_column("reason", type_=sa.Text(), existing_type=sa.String(2000))
        jobs.add_column(sa.Column("queue_reason", sa.Text(), nullable=True))
        jobs.add_column(sa.Column("slot_key", sa.String(160), nullable=True))
        jobs.add_column(sa.Column("claim_owner", sa.String(96), nullable=True))
        jobs.add_column(sa.Column("claim_expires_at", _TZ, nullable=True))
        jobs.add_column(sa.Column("next_attempt_at", _TZ, nullable=True))
        jobs.add_column(
            sa.Column("transient_errors", sa.Integer(), nullable=False, server_default="0")
        )
        jobs.create_index("ix_jobs_slot_key", ["slot_key"])
        jobs.create_index("ix_jobs_next_attempt_at", ["next_attempt_at"])
    with op.batch_alter_table("segments") as segments:
        segments.alter_column("error", type_=sa.Text(), existing_type=sa.String(4000))
        segments.alter_column("handle", type_=sa.Text(), existing_type=sa.String(256))
        segments.add_column(sa.Column("slot_key", sa.String(160), nullable=True))
        segments.add_column(sa.Column("progress", sa.JSON(), nullable=True))
        segments.create_index("ix_segments_slot_key", ["slot_key"])
    with op.batch_alter_table("checkpoints") as checkpoints:
        checkpoints.add_column(sa.Column("rejected", sa.Text(), nullable=True))
    with op.batch_alter_table("events") as events:
        events.alter_column("message", type_=sa.Text(), existing_type=sa.String(4000))


def downgrade() -> None:
    with op.batch_alter_table("events") as events:
        events.alter_column("message", type_=sa.String(4000), existing_type=sa.Text())
    with op.batch_alter_table("checkpoints") as checkpoints:
        checkpoints.drop_column("rejected")
    with op.batch_alter_table("segments") as segments:
        segments.drop_index("ix_segments_slot_key")
        segments.drop_column("progress")
        segments.drop_column("slot_key")
        segments.alter_column("handle", type_=sa.String(256), existing_type=sa.Text())
        segments.alter_column("error", type_=sa.String(4000), existing_type=sa.Text())
    with op.batch_alter_table("jobs") as jobs:
        jobs.drop_index("ix_jobs_next_attempt_at")
        jobs.drop_index("ix_jobs_slot_key")
        jobs.drop_column("transient_errors")
        jobs.drop_column("next_attempt_at")
        jobs.drop_column("claim_expires_at")
        jobs.drop_column("claim_owner")
        jobs.drop_column("slot_key")
        jobs.drop_column("queue_reason")
        jobs.alter_column("reason", type_=sa.String(2000), existing_type=sa.Text())
