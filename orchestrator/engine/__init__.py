"""The engine: admission, launch, watch and collect, cancel, the checkpoint store, the claim.

`Engine` (facade.py) is what the API, the embedded loop (reconcile_loop.py) and the Celery tasks
call.
"""

from orchestrator.engine.facade import Engine, JobNotFound

__all__ = ["Engine", "JobNotFound"]
