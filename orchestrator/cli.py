"""The `baton` command: serve the orchestrator, run the demo, and drive jobs over the REST API."""

from __future__ import annotations

import argparse
import getpass
import os
import sys
import tempfile
import threading
import time
from importlib import resources
from pathlib import Path
from typing import Any

import httpx
import uvicorn
from pydantic import ValidationError

from orchestrator.api.main import create_app
from orchestrator.auth import issue_token
from orchestrator.config import Settings
from orchestrator.credentials import KaggleCredentialsIn, rotate_all
from orchestrator.db import Database
from orchestrator.migrate import upgrade
from orchestrator.secret_box import SecretBoxError
from orchestrator.service import build_secret_box, build_services, prestart
from orchestrator.spec import JobSpec, load_spec_file

FINISHED = {"succeeded", "failed", "cancelled"}


def _serve(args: argparse.Namespace) -> int:
    settings = Settings()
    prestart(settings)
    app = create_app(build_services(settings))
    print(f"Baton on http://{args.host}:{args.port}  (data: {settings.data_dir})", flush=True)
    print(f"Admin token file: {settings.admin_token_file}", flush=True)
    uvicorn.run(app, host=args.host, port=args.port, log_level="info")
    return 0


def _migrate(args: argparse.Namespace) -> int:
    settings = Settings()
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    upgrade(settings.resolved_database_url)
    print("database is at the latest schema")
    return 0


def _token(args: argparse.Namespace) -> int:
    settings = Settings()
    prestart(settings)
    db = Database(settings.resolved_database_url)
    with db.transaction() as session:
        token = issue_token(session, args.user, args.label)
    db.dispose()
    # Shown once, to the person who asked for it; only its hash is stored.
    print(token)
    return 0


def _read_key(key_file: str | None) -> str:
    # Never from argv: a command line is visible to every user in the process list.
    if key_file is not None:
        try:
            return Path(key_file).read_text().strip()
        except OSError as exc:
            # Without the path: someone who typed the key there would see it echoed back.
            raise SystemExit(f"cannot read --key-file: {exc.strerror}") from None
    if sys.stdin.isatty():
        return getpass.getpass("Kaggle API key: ").strip()
    return sys.stdin.read().strip()


def _kaggle_credentials(args: argparse.Namespace) -> int:
    try:
        body = KaggleCredentialsIn(username=args.username, key=_read_key(args.key_file))
    except ValidationError as exc:
        # Name the field and the rule, never the rejected value: it may be the key.
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
        raise SystemExit(f"invalid Kaggle credentials: {problems}") from None
    client = _client(args)
    try:
        stored = client.call("PUT", "/api/v1/credentials/kaggle", body.model_dump())
    finally:
        client.http.close()
    print(f"stored Kaggle credentials for {stored['username']} (updated {stored['updated_at']})")
    return 0


def _rotate_secret_keys(args: argparse.Namespace) -> int:
    settings = Settings()
    prestart(settings)
    box = build_secret_box(settings)
    db = Database(settings.resolved_database_url)
    try:
        with db.transaction() as session:
            count = rotate_all(session, box)
    finally:
        db.dispose()
    print(f"re-encrypted {count} stored credential(s) under the first key of {box.source}")
    return 0


class Client:
    """A thin REST client for the CLI."""

    def __init__(self, url: str, token: str) -> None:
        self.http = httpx.Client(
            base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=30
        )

    def call(self, method: str, path: str, body: Any = None) -> Any:
        response = self.http.request(method, path, json=body)
        if response.status_code >= 400:
            raise SystemExit(f"error {response.status_code}: {response.text}")
        return response.json()


def _client(args: argparse.Namespace) -> Client:
    token = os.environ.get("BATON_TOKEN")
    if not token:
        token_file = Settings().admin_token_file
        if not token_file.exists():
            raise SystemExit(f"set BATON_TOKEN, or start `baton serve` once to create {token_file}")
        token = token_file.read_text().strip()
    return Client(args.url, token)


def _print_job(job: dict[str, Any]) -> None:
    print(
        f"{job['id']}  {job['name']:<24} {job['state']:<10} "
        f"{job['steps_done']}/{job['total_steps']} steps"
        + (f"  ({job['reason']})" if job.get("reason") else "")
    )


def _print_segments(segments: list[dict[str, Any]]) -> None:
    print(f"{'seg':>4} {'state':<10} {'outcome':<9} {'steps':>13} {'train s':>8} {'save s':>7}")
    for seg in segments:
        steps = f"{seg['start_step']}-{seg['end_step'] if seg['end_step'] is not None else '?'}"
        timings = seg.get("timings") or {}
        print(
            f"{seg['index']:>4} {seg['state']:<10} {seg['outcome'] or '':<9} {steps:>13} "
            f"{timings.get('train') or 0:>8.2f} {timings.get('save') or 0:>7.2f}"
        )


def _submit(args: argparse.Namespace) -> int:
    client = _client(args)
    job = client.call("POST", "/api/v1/jobs", load_spec_file(Path(args.spec)))
    _print_job(job)
    return _follow(client, job["id"]) if args.wait else 0


def _jobs(args: argparse.Namespace) -> int:
    for job in _client(args).call("GET", "/api/v1/jobs")["items"]:
        _print_job(job)
    return 0


def _show(args: argparse.Namespace) -> int:
    client = _client(args)
    _print_job(client.call("GET", f"/api/v1/jobs/{args.job}"))
    _print_segments(client.call("GET", f"/api/v1/jobs/{args.job}/segments"))
    return 0


def _logs(args: argparse.Namespace) -> int:
    client = _client(args)
    response = client.http.get(f"/api/v1/jobs/{args.job}/segments/{args.segment}/log")
    if response.status_code >= 400:
        raise SystemExit(f"error {response.status_code}: {response.text}")
    print(response.text, end="")
    return 0


def _action(args: argparse.Namespace) -> int:
    _print_job(_client(args).call("POST", f"/api/v1/jobs/{args.job}/{args.command}"))
    return 0


def _follow(client: Client, job_id: str) -> int:
    """Print the job's events as they happen until it finishes."""
    last = 0
    while True:
        for event in client.call("GET", f"/api/v1/jobs/{job_id}/events?after={last}"):
            last = event["id"]
            where = (
                f"segment {event['segment_index']}" if event["segment_index"] is not None else "job"
            )
            detail = f": {event['message']}" if event["message"] else ""
            print(f"  {event['created_at'][11:19]}  {where:<11} {event['kind']}{detail}")
        job = client.call("GET", f"/api/v1/jobs/{job_id}")
        if job["state"] in FINISHED:
            _print_job(job)
            return 0 if job["state"] == "succeeded" else 1
        time.sleep(0.5)


def _demo_spec_path() -> Path:
    return Path(str(resources.files("trainers") / "examples" / "demo.yaml"))


def _demo(args: argparse.Namespace) -> int:
    settings = Settings()
    prestart(settings)
    server = uvicorn.Server(
        uvicorn.Config(create_app(build_services(settings)), port=args.port, log_level="warning")
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.05)
    url = f"http://127.0.0.1:{args.port}"
    client = Client(url, settings.admin_token_file.read_text().strip())
    spec_path = Path(args.spec) if args.spec else _demo_spec_path()
    spec = load_spec_file(spec_path)
    job = client.call("POST", "/api/v1/jobs", spec)
    token_hint = f'-H "Authorization: Bearer $(cat {settings.admin_token_file})"'
    print(f"Baton is serving {url} (OpenAPI docs: {url}/docs); data in {settings.data_dir}")
    print(f"Submitted {spec_path.name} as job {job['id']}. Watch it with:")
    print(f"  curl {token_hint} {url}/api/v1/jobs/{job['id']}/segments")
    code = _follow(client, job["id"])
    segments = client.call("GET", f"/api/v1/jobs/{job['id']}/segments")
    _print_segments(segments)
    final = [seg for seg in segments if seg["checkpoint"]][-1]["checkpoint"]["model_digest"]
    print(f"final model_digest {final}")
    if args.verify and code == 0:
        code = _verify(JobSpec.model_validate(spec), final)
    server.should_exit = True
    thread.join()
    return code


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


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="baton", description=__doc__)
    parser.add_argument(
        "--url", default=os.environ.get("BATON_URL", "http://127.0.0.1:8000"), help="API base URL"
    )
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser("serve", help="run the API with the embedded reconcile loop")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8000)
    serve.set_defaults(run=_serve)
    commands.add_parser("migrate", help="apply database migrations").set_defaults(run=_migrate)
    demo = commands.add_parser("demo", help="serve, submit the demo job and follow it")
    demo.add_argument("--port", type=int, default=8765)
    demo.add_argument("--spec", help="a spec file instead of trainers/examples/demo.yaml")
    demo.add_argument(
        "--no-verify",
        dest="verify",
        action="store_false",
        help="skip the uninterrupted comparison run",
    )
    demo.set_defaults(run=_demo)
    token = commands.add_parser("token", help="create a user (if new) and print a new API token")
    token.add_argument("user")
    token.add_argument("--label", default="cli")
    token.set_defaults(run=_token)
    submit = commands.add_parser("submit", help="submit a YAML or JSON spec")
    submit.add_argument("spec")
    submit.add_argument("--wait", action="store_true", help="follow the job until it finishes")
    submit.set_defaults(run=_submit)
    commands.add_parser("jobs", help="list your jobs").set_defaults(run=_jobs)
    show = commands.add_parser("show", help="a job and its segments")
    show.add_argument("job")
    show.set_defaults(run=_show)
    kaggle = commands.add_parser(
        "kaggle-credentials",
        help="store your Kaggle user name and API key (the key is read from stdin or a file)",
        # No prefix matching: `--key SECRET` must be an error, not a guess at --key-file.
        allow_abbrev=False,
    )
    kaggle.add_argument("--username", required=True, help="your Kaggle user name")
    kaggle.add_argument("--key-file", help="a file holding the API key; default: read stdin")
    kaggle.set_defaults(run=_kaggle_credentials)
    commands.add_parser(
        "rotate-secret-keys",
        help="re-encrypt stored credentials under the first key of BATON_SECRET_KEYS",
    ).set_defaults(run=_rotate_secret_keys)
    logs = commands.add_parser("logs", help="a segment's session log")
    logs.add_argument("job")
    logs.add_argument("segment", type=int)
    logs.set_defaults(run=_logs)
    for action in ("cancel", "pause", "resume"):
        sub = commands.add_parser(action, help=f"{action} a job")
        sub.add_argument("job")
        sub.set_defaults(run=_action)
    return parser


def main(argv: list[str] | None = None) -> int:
    # Make trainers in the current directory importable, after Baton's own packages.
    sys.path.append(os.getcwd())
    args = build_parser().parse_args(argv)
    try:
        code: int = args.run(args)
    except SecretBoxError as exc:
        # A key problem is the operator's to fix; the message names the setting, not a value.
        raise SystemExit(f"baton: {exc}") from None
    return code


if __name__ == "__main__":
    sys.exit(main())
