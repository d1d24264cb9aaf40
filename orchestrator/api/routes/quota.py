"""/api/v1/quota: accelerator time left on your Kaggle account, as the engine sizes sessions by."""

from __future__ import annotations

from anyio import to_thread
from fastapi import APIRouter, HTTPException, status
from sqlalchemy import select

from orchestrator.api.deps import CurrentUser, ServicesDep
from orchestrator.backends.base import BackendError
from orchestrator.models import Job, KaggleCredential
from orchestrator.service import Services
from orchestrator.spec import stored_spec
from orchestrator.wire import QuotaOut

# Kaggle's weekly allowance: 30 h of GPU, 20 h of TPU (the API reports only what is left).
GPU_WEEKLY_SECONDS = 30 * 3600.0
WEEKLY_ALLOWANCE_SECONDS = {"tpu": 20 * 3600.0}

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
async def list_quota(user: CurrentUser, services: ServicesDep) -> list[QuotaOut]:
    """One entry per Kaggle account you use (empty without Kaggle credentials or Kaggle jobs)."""
    try:
        return await ask_account_quota(services, user.id)
    except BackendError as exc:
        unavailable = status.HTTP_503_SERVICE_UNAVAILABLE
        raise HTTPException(unavailable, f"quota unavailable: {exc}") from exc


async def ask_account_quota(services: Services, user_id: str) -> list[QuotaOut]:
    """account_quota on the threads kept for calls to Kaggle (Services.outbound_calls)."""
    return await to_thread.run_sync(
        account_quota, services, user_id, limiter=services.outbound_calls
    )


def account_quota(services: Services, user_id: str) -> list[QuotaOut]:
    """The user's Kaggle quota, asked of Kaggle now; raises BackendError if it cannot answer."""
    with services.db.transaction() as session:
        credentials = session.get(KaggleCredential, user_id)
        job = session.scalars(
            select(Job)
            .where(Job.user_id == user_id, Job.backend == "kaggle")
            .order_by(Job.created_at.desc())
        ).first()
        if credentials is None or job is None:
            return []
        account = credentials.username
        kaggle = stored_spec(job.spec).kaggle
        assert kaggle is not None  # a Kaggle job's spec always has its options
        accelerator = kaggle.accelerator.value
    quota = services.engine.backends.for_job(job).quota()
    found = (
        []
        if quota is None
        else [
            QuotaOut(
                account=account,
                accelerator=accelerator,
                seconds_left=quota.seconds_left,
                refresh_at=quota.refresh_at,
                allowance_seconds=WEEKLY_ALLOWANCE_SECONDS.get(accelerator, GPU_WEEKLY_SECONDS),
            )
        ]
    )
    services.quota_seen.remember(user_id, found)
    return found
