"""Alembic migrations for Baton's database."""
