"""/livez (is the process answering: no dependency checked), /healthz (can the service do its
work: write its database and data dir) and /readyz (may a load balancer send it traffic: the
database answers and its schema is current)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Response, status

from orchestrator.api.deps import ServicesDep
from orchestrator.health_checks import (
    OK,
    database_can_write,
    directory_can_write,
    schema_is_current,
)
from orchestrator.wire import Health, Readiness

router = APIRouter(tags=["health"])
_DOWN: dict[int | str, dict[str, Any]] = {
    503: {"description": "A part is down; the body says which", "model": Health}
}


@router.get("/livez")
async def livez() -> dict[str, str]:
    """Answers from the event loop alone, so a restart policy never kills a busy process."""
    return {"status": "alive"}


@router.get("/healthz", response_model=Health, responses=_DOWN)
def healthz(services: ServicesDep, response: Response) -> Health:
    checks = {
        "database": database_can_write(services.db),
        "data_dir": directory_can_write(services.settings.data_dir),
    }
    healthy = all(result == OK for result in checks.values())
    if not healthy:
        response.status_code = status.HTTP_503_SERVICE_UNAVAILABLE
    return Health(
        status="ok" if healthy else "unhealthy",
        database=services.db.engine.dialect.name,
        checks=checks,
    )


@router.get("/readyz", response_model=Readiness, responses={503: {"model": Readiness}})
def readyz(services: ServicesDep, response: Response) -> Readiness:
    schema = schema_is_current(services.db)
    if schema != OK:
        response.status_code = status.HTTP_503_SERVICE_UNAVAILABLE
    return Readiness(status="ready" if schema == OK else "not ready", schema_state=schema)
