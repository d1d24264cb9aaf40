"""webhook notifications: the outbox and the notifier's cursor over the events table

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-22 08:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "notifications",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column(
            "job_id", sa.String(32), sa.ForeignKey("jobs.id", ondelete="CASCADE"), nullable=False
        ),
        sa.Column(
            "event_id", sa.Integer(), sa.ForeignKey("events.id", ondelete="CASCADE"), nullable=False
        ),
        sa.Column("hook_index", sa.Integer(), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("next_attempt_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("last_error", sa.String(500), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("delivered_at", sa.DateTime(timezone=True), nullable=True),
        sa.UniqueConstraint("event_id", "hook_index"),
    )
    op.create_index("ix_notifications_job_id", "notifications", ["job_id"])
    op.create_index("ix_notifications_state", "notifications", ["state"])
    op.create_index("ix_notifications_next_attempt_at", "notifications", ["next_attempt_at"])
    op.create_table(
        "notification_cursor",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("last_event_id", sa.Integer(), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("notification_cursor")
    op.drop_index("ix_notifications_next_attempt_at", "notifications")
    op.drop_index("ix_notifications_state", "notifications")
    op.drop_index("ix_notifications_job_id", "notifications")
    op.drop_table("notifications")
