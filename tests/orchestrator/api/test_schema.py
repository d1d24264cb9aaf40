"""Schemathesis drives the OpenAPI schema with every check it has (`--checks all`), one call at
a time and in sequences that follow the schema's links, on SQLite and on PostgreSQL: no 5xx, no
answer off the schema, no valid request refused, no invalid one accepted."""

from __future__ import annotations

import shutil
import tempfile
import uuid
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from fastapi.testclient import TestClient
from hypothesis import Phase, settings
from schemathesis.config import SchemathesisConfig
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from orchestrator.api.main import create_app
from orchestrator.auth_throttle import FailureThrottle
from orchestrator.models import Base
from orchestrator.service import build_services, prestart
from tests.factories import (
    ADMIN_TOKEN,
    auth,
    job_spec,
    make_settings,
)
from tests.support.databases import POSTGRES_URL, enter_postgres, postgres_schema

# Bodies with rules JSON Schema cannot state get 422 for some schema-valid values; each route
# documents them in its 422 answer. Schemathesis's own advice for such rules is to allow 422
# for that operation only (`st explain ST202`).
STATE_DEPENDENT_422 = {
    # The trainer must exist on this server as a worker.Trainer subclass in an allowed package;
    # cross-field rules (kaggle options need backend kaggle and stored credentials).
    "POST /api/v1/jobs",
    # expires_at must lie between now and 10 years from now.
    "POST /api/v1/tokens",
}
ALLOW_STATE_DEPENDENT_422 = {
    "operations": [
        {
            "include-name": name,
            "checks": {
                "positive_data_acceptance": {
                    "expected-statuses": [
                        *("2xx", "3xx", "401", "403", "404", "409", "429", "5xx", "422")
                    ]
                }
            },
        }
        for name in sorted(STATE_DEPENDENT_422)
    ]
}
# Schemathesis sends the token itself, so it knows which requests carry one.
AS_ADMIN = {"auth": {"openapi": {"HTTPBearer": {"bearer": ADMIN_TOKEN}}}}
CONFIG = SchemathesisConfig.from_dict(ALLOW_STATE_DEPENDENT_422 | AS_ADMIN)


class Served:
    """The app over one database. Schemathesis reads the schema when this module is imported;
    the database behind it is prepared by the `prepared` fixture before the first call."""

    def __init__(self, name: str, database_url: str | None = None) -> None:
        self.name = name
        self.root = Path(tempfile.mkdtemp(prefix=f"baton-schema-{name}-"))
        extra = {"database_url": database_url} if database_url else {}
        self.settings = make_settings(self.root / "data", **extra)
        self.services = build_services(self.settings, embedded_loop=False)
        # Schemathesis sends many wrong tokens from one address on purpose; the throttle that
        # would then answer 429 to its valid ones has tests of its own
        # (tests/orchestrator/api/ui/test_session.py).
        self.services.auth_failures = FailureThrottle(burst=10**9)
        self.app = create_app(self.services)
        self.schema = schemathesis.openapi.from_asgi("/openapi.json", self.app, config=CONFIG)

    @contextmanager
    def database(self) -> Iterator[None]:
        yield

    def prepare(self) -> None:
        """Migrate, and submit one real job, so job routes answer with data and conflicts."""
        prestart(self.settings)
        with TestClient(self.app) as client:
            assert client.post("/api/v1/jobs", json=job_spec(), headers=auth()).status_code == 201

    def reset(self) -> None:
        """Back to the prepared state: no jobs, credentials or tokens but the admin's."""
        with self.services.db.transaction() as session:
            for table in reversed(Base.metadata.sorted_tables):
                if table.name == "api_tokens":
                    session.execute(table.delete().where(table.c.bootstrap.is_(False)))
                elif table.name != "users":
                    session.execute(table.delete())
        self.prepare()

    def close(self) -> None:
        self.services.db.dispose()
        shutil.rmtree(self.root, ignore_errors=True)


class ServedOnPostgres(Served):
    """The same over a fresh PostgreSQL schema, created before and dropped after."""

    def __init__(self) -> None:
        self.pg_schema = f"t_{uuid.uuid4().hex[:10]}"
        super().__init__("postgresql", f"{POSTGRES_URL}?options=-csearch_path%3D{self.pg_schema}")

    @contextmanager
    def database(self) -> Iterator[None]:
        with ExitStack() as stack:
            enter_postgres(stack, lambda: postgres_schema(schema=self.pg_schema))
            yield
            self.services.db.dispose()


# Hypothesis generates hundreds of calls per operation: minutes, not the inner loop's seconds.
pytestmark = pytest.mark.slow

SQLITE = Served("sqlite")
POSTGRES = ServedOnPostgres()


SERVED = {"sqlite": SQLITE, "postgresql": POSTGRES}


@pytest.fixture(scope="module")
def prepared() -> Iterator[Callable[[str], Served]]:
    """Prepares each database on first use; cleans up after the module."""
    with ExitStack() as stack:
        ready: dict[str, Served] = {}

        def prepare(name: str) -> Served:
            if name not in ready:
                served = SERVED[name]
                stack.callback(served.close)
                stack.enter_context(served.database())
                served.prepare()
                ready[name] = served
            return ready[name]

        yield prepare


def _every_check(case: schemathesis.Case) -> None:
    case.call_and_validate()  # no `checks=`: every built-in check


@SQLITE.schema.parametrize()
@settings(max_examples=25, deadline=None)
def test_every_operation_passes_every_check_on_sqlite(
    case: schemathesis.Case, prepared: Callable[[str], Served]
) -> None:
    prepared("sqlite")
    _every_check(case)


@pytest.mark.integration
@POSTGRES.schema.parametrize()
@settings(max_examples=25, deadline=None)
def test_every_operation_passes_every_check_on_postgresql(
    case: schemathesis.Case, prepared: Callable[[str], Served]
) -> None:
    prepared("postgresql")
    _every_check(case)


@pytest.mark.parametrize(
    "database", ["sqlite", pytest.param("postgresql", marks=pytest.mark.integration)]
)
def test_call_sequences_along_the_links_pass_every_check(
    database: str, prepared: Callable[[str], Served]
) -> None:
    created: set[str] = set()  # ids of the jobs and tokens the sequences made
    followed: set[str] = set()  # operations that answered 2xx for one of them

    served = prepared(database)

    class Sequences(served.schema.as_state_machine()):  # type: ignore[misc]
        def setup(self) -> None:
            # Every sequence starts from the same state: Hypothesis expects the same choices to
            # lead to the same answers, and refuses to go on ("inconsistent data generation")
            # when an earlier sequence's jobs and tokens change what a later one is answered.
            served.reset()

        def before_call(self, case: schemathesis.Case) -> None:
            # A random spec is almost never one this server can run (its trainer must exist
            # here, its fields must agree), nor a random expiry in the future (see
            # STATE_DEPENDENT_422), so the links from them would go unused. Valid bodies are
            # sent instead; the stateless test above fuzzes these routes' bodies.
            if case.meta is None or not case.meta.generation.mode.is_positive:
                return
            if case.operation.label == "POST /api/v1/jobs":
                case.body = job_spec()
            elif case.operation.label == "POST /api/v1/tokens":
                case.body = {"name": "sequence"}

        def after_call(self, response: Any, case: schemathesis.Case) -> None:
            super().after_call(response, case)
            if not 200 <= response.status_code < 300:
                return
            if case.operation.label in ("POST /api/v1/jobs", "POST /api/v1/tokens"):
                created.add(response.json()["id"])
            elif created & set((case.path_parameters or {}).values()):
                followed.add(case.operation.label)

    # No shrinking: the server keeps its state between sequences (jobs, revoked tokens), so a
    # replayed sequence takes other branches and Hypothesis reports that instead of the failure.
    Sequences.run(
        settings=settings(
            max_examples=50,
            stateful_step_count=6,
            deadline=None,
            phases=[Phase.explicit, Phase.reuse, Phase.generate],
        )
    )
    # The links were followed: some route answered for a job or token a sequence just made.
    assert followed, "no link from a new job or token was followed"


# The checks that hold whatever the token: the others assume a caller who may call the route.
UNAUTHENTICATED_CHECKS = [
    schemathesis.checks.not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
]


UNAUTHENTICATED = schemathesis.openapi.from_asgi(
    "/openapi.json", SQLITE.app, config=SchemathesisConfig.from_dict(ALLOW_STATE_DEPENDENT_422)
)


@UNAUTHENTICATED.parametrize()
@settings(max_examples=10, deadline=None)
def test_unauthenticated_calls_get_401(
    case: schemathesis.Case, prepared: Callable[[str], Served]
) -> None:
    prepared("sqlite")
    response = case.call_and_validate(checks=UNAUTHENTICATED_CHECKS)
    # Negative cases include methods the route does not have (405 before any auth).
    if not case.path.startswith("/api/") or case.method.upper() != case.operation.method.upper():
        return
    # FastAPI reads the body before any dependency runs: a body that cannot be read as JSON at
    # all is refused (400, 422) before the token is looked at. Nothing else may answer here.
    if response.status_code == 400:
        assert response.json() == {"detail": "There was an error parsing the body"}
        return
    if response.status_code == 422:
        assert {error["type"] for error in response.json()["detail"]} == {"json_invalid"}
        return
    # A generated path the router matches to no route (an empty step, say) is a 404
    # before any route runs, like the 405 above: it says nothing about any job.
    if response.status_code == 404 and response.json() == {"detail": "Not Found"}:
        return
    assert response.status_code == 401, (case.method, case.path, response.text)
    assert response.headers.get("www-authenticate") == ["Bearer"]
