"""How long the texts users read may be, on both sides: one owner for every storage limit.

The worker clips a failure reason to one line (worker.reasons.one_line); the orchestrator clips
what it stores (orchestrator.engine.text.clip) and an event's message (transitions.py).
"""

from __future__ import annotations

# A one-line failure reason: a segment's error, a backend's problem.
MAX_REASON_CHARS = 300
# Stored texts a user reads (a job's reason, a segment's error, a rejected checkpoint's problem).
TEXT_LIMIT = 2000
# An event's message: room for a reason and what led to it.
EVENT_MESSAGE_LIMIT = 4000
