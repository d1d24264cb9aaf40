"""Baton's mutation check: listed one-line breaks of its promises, each run against named tests.

`python -m tests.mutation` (make mutate) runs every mutant; `--guarantees` only those of the
guarantee table in docs/testing.md (CI). See docs/testing.md for why a curated list.
"""
