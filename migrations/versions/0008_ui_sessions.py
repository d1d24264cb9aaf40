"""ui_sessions: status page sign-ins kept on the server, so signing out revokes the cookie

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-23 20:45:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "ui_sessions",
        sa.Column("id_hash", sa.String(length=64), nullable=False),
        sa.Column("token_id", sa.String(length=32), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["token_id"], ["api_tokens.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id_hash"),
    )
    op.create_index("ix_ui_sessions_token_id", "ui_sessions", ["token_id"])


def downgrade() -> None:
    op.drop_index("ix_ui_sessions_token_id", table_name="ui_sessions")
    op.drop_table("ui_sessions")
