"""Builds the FastAPI app. Migrations are applied before this, by `baton serve` (prestart)."""

from __future__ import annotations

import gc
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from importlib.metadata import version

from anyio import to_thread
from fastapi import FastAPI, Request, status
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, RedirectResponse

from orchestrator.api.body_limit import BodyLimit
from orchestrator.api.method_not_allowed import method_not_allowed
from orchestrator.api.routes import (
    checkpoints,
    credentials,
    health,
    jobs,
    metrics,
    quota,
    tokens,
)
from orchestrator.api.security_headers import SecurityHeaders
from orchestrator.api.ui import router as ui
from orchestrator.api.validation_errors import validation_error_answer
from orchestrator.config import Settings
from orchestrator.engine import JobNotFound
from orchestrator.lifecycle import ActionConflict
from orchestrator.metrics import api_registry
from orchestrator.queries import JobNotVisible
from orchestrator.service import Services, build_services
from orchestrator.transitions import IllegalTransition, StaleState


def freeze_start_up_objects() -> None:
    """Move everything built at start-up (modules, routes, models, pools) out of the collector's
    reach. A full collection otherwise walks all of it: 100 to 300 ms with every thread stopped,
    the stall the load benchmark's breakdown showed (benchmarks/breakdown.py, README)."""
    gc.collect()
    gc.freeze()


def create_app(services: Services) -> FastAPI:
    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        # The request handlers that touch the database run on this many threads: more only
        # fight over the GIL (BATON_API_THREADS).
        to_thread.current_default_thread_limiter().total_tokens = services.settings.api_threads
        freeze_start_up_objects()
        if services.loop is not None:
            services.loop.start()
        if services.notifier is not None:
            services.notifier.start()
        try:
            yield
        finally:
            if services.notifier is not None:
                services.notifier.stop()
            if services.loop is not None:
                services.loop.stop()

    app = FastAPI(
        title="Baton",
        summary="Chains training jobs across time-limited sessions.",
        version=version("baton"),
        lifespan=lifespan,
    )
    app.state.services = services
    app.state.metrics_registry = api_registry(services.db)
    app.include_router(health.router)
    app.include_router(metrics.router)
    app.include_router(jobs.router)
    app.include_router(checkpoints.router)
    app.include_router(credentials.router)
    app.include_router(quota.router)
    app.include_router(tokens.router)
    app.include_router(ui.router)
    app.include_router(ui.root)
    app.mount("/ui/static", ui.static, name="ui-static")
    app.add_exception_handler(RequestValidationError, validation_error_answer)
    app.add_exception_handler(status.HTTP_405_METHOD_NOT_ALLOWED, method_not_allowed)
    app.add_middleware(BodyLimit, max_bytes=services.settings.max_body_bytes)
    app.add_middleware(SecurityHeaders)

    @app.exception_handler(ActionConflict)
    @app.exception_handler(IllegalTransition)
    @app.exception_handler(StaleState)
    async def conflict(request: Request, exc: Exception) -> JSONResponse:
        return JSONResponse({"detail": str(exc)}, status_code=status.HTTP_409_CONFLICT)

    @app.exception_handler(ui.SignInRequired)
    async def sign_in(request: Request, exc: Exception) -> RedirectResponse:
        return RedirectResponse("/ui/signin", status.HTTP_303_SEE_OTHER)

    @app.exception_handler(JobNotFound)
    @app.exception_handler(JobNotVisible)
    async def not_found(request: Request, exc: Exception) -> JSONResponse:
        return JSONResponse({"detail": f"job {exc} not found"}, status.HTTP_404_NOT_FOUND)

    return app


# What each process of `baton serve --workers N` imports (uvicorn spawns, then calls it).
APP_FACTORY = "orchestrator.api.main:app_from_environment"


def app_from_environment() -> FastAPI:
    """One API process: its own services, built from the environment (BATON_*)."""
    return create_app(build_services(Settings()))
