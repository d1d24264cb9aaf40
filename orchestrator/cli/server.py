"""Commands that run the orchestrator itself: serve, migrate, demo, rotate-secret-keys."""

from __future__ import annotations

import socket
import tempfile
import threading
import time
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from orchestrator.cli import render
from orchestrator.cli.errors import CliError, operator_errors
from orchestrator.cli.jobs import follow, read_spec

if TYPE_CHECKING:
    from orchestrator.config import Settings
    from orchestrator.spec import JobSpec

# These commands run the server itself: each imports the server side (the API, the database,
# uvicorn) inside its body, so that the rest of the CLI never loads it.


def admin_token(settings: Settings) -> str:
    if settings.admin_token is not None:
        return settings.admin_token.get_secret_value()
    return settings.admin_token_file.read_text().strip()


def serve(
    host: Annotated[str, typer.Option(help="address to listen on")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="port to listen on")] = 8000,
    workers: Annotated[
        int,
        typer.Option(
            min=1,
            help="API processes sharing the port; more than 1 needs BATON_RECONCILER=celery",
        ),
    ] = 1,
) -> None:
    """Run the API, the status page and the embedded reconcile loop."""
    with operator_errors():
        _serve(host, port, workers)


def _serve(host: str, port: int, workers: int) -> None:
    import uvicorn
    from uvicorn.supervisors import Multiprocess

    from orchestrator.api.main import APP_FACTORY, create_app
    from orchestrator.auth import check_admin_token
    from orchestrator.cli.live_server import announce
    from orchestrator.config import Settings
    from orchestrator.service import build_services, prestart

    settings = Settings()
    if workers > 1 and settings.reconciler != "celery":
        raise CliError(
            "--workers above 1 needs BATON_RECONCILER=celery: "
            "the embedded reconcile loop runs in exactly one process"
        )
    if settings.admin_token is not None:  # a weak one stops the start, before anything opens
        check_admin_token(settings.admin_token.get_secret_value())
    # The port first: a second `baton serve` whose port is taken must not start reconciling.
    listener = bind_listener(host, port)
    prestart(settings)
    announce(settings.data_dir)  # so `baton token NAME` here finds this server's database
    print(f"Baton on http://{host}:{port}  (data: {settings.data_dir})", flush=True)
    print(f"Status page: http://{host}:{port}/ui  (sign in with an API token)", flush=True)
    if settings.admin_token is None:
        print(f"Admin token file: {settings.admin_token_file}", flush=True)
    else:
        print("Admin token: the value of BATON_ADMIN_TOKEN", flush=True)
    if workers == 1:
        app = create_app(build_services(settings))
        uvicorn.Server(uvicorn.Config(app, log_level="info")).run(sockets=[listener])
        return
    # Pre-fork: each process builds its own services from the environment and accepts on the
    # one listening socket; uvicorn's supervisor restarts a process that dies.
    config = uvicorn.Config(APP_FACTORY, factory=True, workers=workers, log_level="info")
    Multiprocess(config, sockets=[listener]).run()


def bind_listener(host: str, port: int) -> socket.socket:
    """The server's socket, bound before anything else starts; CliError if the port is taken."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    listener = socket.socket(family, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        listener.bind((host, port))
    except OSError as exc:
        listener.close()
        raise CliError(f"cannot listen on {host}:{port}: {exc.strerror}") from exc
    listener.listen(2048)
    return listener


def migrate() -> None:
    """Apply database migrations."""
    from orchestrator.config import Settings
    from orchestrator.migrate import upgrade

    settings = Settings()
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    upgrade(settings.resolved_database_url)
    print("database is at the latest schema")


def rotate_secret_keys() -> None:
    """Re-encrypt stored credentials under the first key of BATON_SECRET_KEYS."""
    # The server's existing database, with no start-up step: nothing else is rotated.
    from orchestrator.cli.live_server import open_server_database, server_settings
    from orchestrator.credentials import rotate_all
    from orchestrator.service import build_secret_box

    with operator_errors():
        settings = server_settings()
        box = build_secret_box(settings)
        db = open_server_database(settings)
        try:
            with db.transaction() as session:
                count = rotate_all(session, box)
        finally:
            db.dispose()
    print(f"re-encrypted {count} stored credential(s) under the first key of {box.source}")


def _demo_spec_path() -> Path:
    return Path(str(resources.files("trainers") / "examples" / "demo.yaml"))


def demo(
    port: Annotated[int, typer.Option(help="port for the demo server")] = 8765,
    spec: Annotated[Path | None, typer.Option(help="a spec instead of the demo's")] = None,
    verify: Annotated[
        bool, typer.Option("--verify/--no-verify", help="compare with an uninterrupted run")
    ] = True,
) -> None:
    """Serve, submit the demo job, follow it, and check it against an uninterrupted run."""
    import uvicorn

    from orchestrator.api.main import create_app
    from orchestrator.cli.client import BatonClient
    from orchestrator.config import Settings
    from orchestrator.service import build_services, prestart
    from orchestrator.spec import JobSpec
    from orchestrator.wire import JobOut, SegmentOut

    settings = Settings()
    with operator_errors():
        prestart(settings)
    server = uvicorn.Server(
        uvicorn.Config(create_app(build_services(settings)), port=port, log_level="warning")
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.05)
    url = f"http://127.0.0.1:{port}"
    client = BatonClient(url, admin_token(settings))
    try:
        spec_path = spec or _demo_spec_path()
        body = read_spec(spec_path)
        job: JobOut = client.call("POST", "/api/v1/jobs", JobOut, body=body)
        print(f"Baton is serving {url} (status page: {url}/ui, OpenAPI docs: {url}/docs)")
        print(f"Submitted {spec_path.name} as job {job.id}. Watch it with:")
        print(f"  baton --url {url} watch {job.id}")
        code = follow(client, job.id)
        segments: list[SegmentOut] = client.call(
            "GET", f"/api/v1/jobs/{job.id}/segments", list[SegmentOut]
        )
        render.console.print(render.segments_table(segments))
        committed = [seg.checkpoint for seg in segments if seg.checkpoint]
        if not committed:
            raise typer.Exit(1)
        final = str(committed[-1]["model_digest"])
        print(f"final model_digest {final}")
        if verify and code == 0:
            code = _verify(JobSpec.model_validate(body), final)
    finally:
        client.close()
        server.should_exit = True
        thread.join()
    if code:
        raise typer.Exit(code)


def _verify(spec: JobSpec, chained_digest: str) -> int:
    from orchestrator.reference import run_uninterrupted

    print("Running the same spec in one uninterrupted session to compare...", flush=True)
    with tempfile.TemporaryDirectory() as workdir:
        reference = run_uninterrupted(spec, Path(workdir))
    if reference.manifest is None:
        print(f"reference run failed: {reference.problem}")
        return 1
    same = reference.manifest.model_digest == chained_digest
    print(f"uninterrupted model_digest {reference.manifest.model_digest}")
    print("bitwise identical to the chained run" if same else "MISMATCH with the chained run")
    return 0 if same else 1


def register(app: typer.Typer) -> None:
    for command in (serve, migrate, demo):
        app.command()(command)
    app.command("rotate-secret-keys")(rotate_secret_keys)
