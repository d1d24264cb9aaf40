"""api tokens: expiry, last use, and which one is the admin's bootstrap token

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-22 07:40:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("api_tokens") as tokens:
        tokens.add_column(sa.Column("expires_at", sa.DateTime(timezone=True), nullable=True))
        tokens.add_column(sa.Column("last_used_at", sa.DateTime(timezone=True), nullable=True))
        tokens.add_column(
            sa.Column("bootstrap", sa.Boolean(), nullable=False, server_default=sa.false())
        )
    # Before this revision the start-up admin token was the admin user's token named "admin".
    op.execute(
        "UPDATE api_tokens SET bootstrap = TRUE WHERE name = 'admin' "
        "AND user_id IN (SELECT id FROM users WHERE name = 'admin')"
    )


def downgrade() -> None:
    with op.batch_alter_table("api_tokens") as tokens:
        tokens.drop_column("bootstrap")
        tokens.drop_column("last_used_at")
        tokens.drop_column("expires_at")
