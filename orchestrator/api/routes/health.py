"""/healthz: is the service up and its database reachable."""

from __future__ import annotations

from fastapi import APIRouter
from sqlalchemy import text

from orchestrator.api.deps import ServicesDep
from orchestrator.api.schemas import Health

router = APIRouter(tags=["health"])


@router.get("/healthz", response_model=Health)
def healthz(services: ServicesDep) -> Health:
    with services.db.transaction() as session:
        session.execute(text("SELECT 1"))
    return Health(status="ok", database=services.db.engine.dialect.name)
