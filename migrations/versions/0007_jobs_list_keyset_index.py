"""jobs: the list's index gains the id, the list's tie-break, for keyset pages and offsets

The job list orders by (created_at, id), newest first, and pages with a cursor on that pair or
an offset. With (user_id, created_at, id) a cursor is one index range, and an offset skips
index entries of an index-only scan instead of fetching every skipped row (at 10,000 jobs, a
page deep in the list went from fetching up to 10,000 rows to reading their index entries).

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-23 20:30:00
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_index("ix_jobs_user_created_id", "jobs", ["user_id", "created_at", "id"])
    op.drop_index("ix_jobs_user_created", table_name="jobs")


def downgrade() -> None:
    op.create_index("ix_jobs_user_created", "jobs", ["user_id", "created_at"])
    op.drop_index("ix_jobs_user_created_id", table_name="jobs")
