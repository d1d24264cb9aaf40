"""/api/v1/quota: accelerator time left on your Kaggle account, as the engine sizes sessions by."""

from __future__ import annotations

from fastapi import APIRouter, HTTPException, status
from sqlalchemy import select

from orchestrator.api.deps import CurrentUser, ServicesDep
from orchestrator.api.schemas import QuotaOut
from orchestrator.backends.base import BackendError
from orchestrator.models import Job, KaggleCredential

router = APIRouter(
    prefix="/api/v1/quota",
    tags=["quota"],
    responses={401: {"description": "Missing or invalid API token"}},
)


@router.get(
    "",
    response_model=list[QuotaOut],
    responses={503: {"description": "Kaggle did not answer; try again"}},
)
def list_quota(user: CurrentUser, services: ServicesDep) -> list[QuotaOut]:
    """One entry per Kaggle account you use (empty without Kaggle credentials or Kaggle jobs)."""
    with services.db.transaction() as session:
        credentials = session.get(KaggleCredential, user.id)
        job = session.scalars(
            select(Job)
            .where(Job.user_id == user.id, Job.backend == "kaggle")
            .order_by(Job.created_at.desc())
        ).first()
        if credentials is None or job is None:
            return []
        account = credentials.username
        accelerator = str(job.spec.get("kaggle", {}).get("accelerator", "t4x2"))
    try:
        quota = services.engine.backends.for_job(job).quota()
    except BackendError as exc:
        unavailable = status.HTTP_503_SERVICE_UNAVAILABLE
        raise HTTPException(unavailable, f"quota unavailable: {exc}") from exc
    if quota is None:
        return []
    return [
        QuotaOut(
            account=account,
            accelerator=accelerator,
            seconds_left=quota.seconds_left,
            refresh_at=quota.refresh_at,
        )
    ]
