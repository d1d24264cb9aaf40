"""One writer per tracker: each appends a job's new steps to the job's one run in it.

The trackers' libraries load only inside `write`: the orchestrator needs them only for jobs that
ask for them (`pip install 'baton[trackers]'`).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Protocol

from orchestrator.trackers.spec import MlflowSpec, TrackersSpec, WandbSpec

# MLflow's log_batch takes at most 1000 metrics a call.
MLFLOW_BATCH = 1000
JOB_TAG = "baton.job_id"


@dataclass(frozen=True)
class StepMetrics:
    step: int
    values: dict[str, float]


@dataclass(frozen=True)
class TrackedJob:
    id: str
    name: str
    config: dict[str, Any]


class TrackerWriter(Protocol):
    name: str

    def write(self, steps: Sequence[StepMetrics], *, finished: bool, now: datetime) -> None:
        """Append `steps` (all after what was written before) to the job's run; `finished`:
        the job has ended, so the run is marked done."""

    def failures(self) -> tuple[type[Exception], ...]:
        """What its library raises when the run cannot be written now (besides OSError)."""


class TensorBoardWriter:
    """Event files in the job's own run directory, one file per write, named by its first step:
    writing the same steps again (a sync cut off before it saved its state) replaces that file
    instead of adding a second copy of each point."""

    name = "tensorboard"

    def failures(self) -> tuple[type[Exception], ...]:
        return ()

    def __init__(self, logdir: Path) -> None:
        self.logdir = logdir

    def write(self, steps: Sequence[StepMetrics], *, finished: bool, now: datetime) -> None:
        if not steps:
            return
        from tensorboard.compat.proto.event_pb2 import Event
        from tensorboard.compat.proto.summary_pb2 import Summary
        from tensorboard.summary.writer.record_writer import RecordWriter

        self.logdir.mkdir(parents=True, exist_ok=True)
        wall_time = now.timestamp()
        final = self.logdir / f"events.out.tfevents.{steps[0].step:012d}.baton"
        # TensorBoard reads every file with "tfevents" in its name: the partial one has none.
        partial = self.logdir / f".baton-{steps[0].step:012d}.partial"
        with open(partial, "wb") as out:
            records = RecordWriter(out)
            header = Event(wall_time=wall_time, file_version="brain.Event:2")
            records.write(header.SerializeToString())
            for point in steps:
                values = [Summary.Value(tag=k, simple_value=v) for k, v in point.values.items()]
                event = Event(wall_time=wall_time, step=point.step, summary=Summary(value=values))
                records.write(event.SerializeToString())
            out.flush()
            os.fsync(out.fileno())
        os.replace(partial, final)


def _library_errors(module: str, name: str) -> tuple[type[Exception], ...]:
    """The library's error base, or none where the library is missing (the write then fails
    with ImportError, which the sync names)."""
    try:
        found: type[Exception] = getattr(__import__(module, fromlist=[name]), name)
    except ImportError:
        return ()
    return (found,)


class WandbWriter:
    """The job's W&B run under one stable id, resumed by every write (`resume="allow"`)."""

    name = "wandb"

    def failures(self) -> tuple[type[Exception], ...]:
        return _library_errors("wandb.errors", "Error")

    def __init__(self, spec: WandbSpec, job: TrackedJob, directory: Path) -> None:
        self.spec = spec
        self.job = job
        self.directory = directory
        self.run_id = spec.run_id or f"baton-{job.id}"

    def write(self, steps: Sequence[StepMetrics], *, finished: bool, now: datetime) -> None:
        import wandb

        # One directory per write, named by its first step: W&B names a run's files by the
        # second it started, so two writes within a second would share them; and writing the
        # same steps again reuses the same place.
        directory = self.directory / self.job.id / f"{steps[0].step:012d}"
        directory.mkdir(parents=True, exist_ok=True)
        run = wandb.init(
            project=self.spec.project,
            entity=self.spec.entity,
            id=self.run_id,
            resume="allow",
            mode=self.spec.mode,
            dir=str(directory),
            name=self.job.name,
            config={"baton_job_id": self.job.id, **self.job.config},
            reinit="create_new",
            settings=wandb.Settings(
                console="off",
                silent=True,
                disable_git=True,
                save_code=False,
                x_disable_stats=True,
                x_disable_meta=True,
                x_save_requirements=False,
                init_timeout=30,  # well inside the job claim's lease
            ),
        )
        try:
            for point in steps:
                run.log(point.values, step=point.step)
        finally:
            run.finish()


def mlflow_store_uri(store: Path) -> str:
    """The server's own MLflow store: a SQLite file (MLflow 3 refuses a plain directory store
    unless told to allow it: that backend is in maintenance mode)."""
    return f"sqlite:///{store.resolve() / 'mlflow.db'}"


class MlflowWriter:
    """The job's MLflow run, found again by its `baton.job_id` tag."""

    name = "mlflow"

    def failures(self) -> tuple[type[Exception], ...]:
        return _library_errors("mlflow.exceptions", "MlflowException")

    def __init__(self, spec: MlflowSpec, job: TrackedJob, store: Path) -> None:
        self.spec = spec
        self.job = job
        self.store = store
        self.tracking_uri = spec.tracking_uri or mlflow_store_uri(store)

    def write(self, steps: Sequence[StepMetrics], *, finished: bool, now: datetime) -> None:
        from mlflow.entities import Metric
        from mlflow.tracking import MlflowClient

        if self.spec.tracking_uri is None:
            self.store.mkdir(parents=True, exist_ok=True)
        client = MlflowClient(tracking_uri=self.tracking_uri)
        run_id = self._run_id(client)
        millis = int(now.timestamp() * 1000)
        metrics = [
            Metric(key, value, millis, point.step)
            for point in steps
            for key, value in point.values.items()
        ]
        for start in range(0, len(metrics), MLFLOW_BATCH):
            client.log_batch(run_id, metrics=metrics[start : start + MLFLOW_BATCH])
        if finished:
            client.set_terminated(run_id, "FINISHED")

    def _run_id(self, client: Any) -> str:
        from mlflow.exceptions import MlflowException

        experiment = client.get_experiment_by_name(self.spec.experiment)
        if experiment is None:
            try:
                # Nothing is logged as an artifact; the location only keeps MLflow from
                # naming one relative to the server's working directory.
                artifacts = (self.store / "artifacts").as_uri()
                experiment_id = client.create_experiment(self.spec.experiment, artifacts)
            except MlflowException:  # another job's sync created it meanwhile
                experiment_id = client.get_experiment_by_name(self.spec.experiment).experiment_id
        else:
            experiment_id = experiment.experiment_id
        found = client.search_runs(
            [experiment_id], filter_string=f"tags.`{JOB_TAG}` = '{self.job.id}'", max_results=1
        )
        if found:
            return str(found[0].info.run_id)
        run = client.create_run(experiment_id, run_name=self.job.name, tags={JOB_TAG: self.job.id})
        return str(run.info.run_id)


def writers_for(spec: TrackersSpec, job: TrackedJob, root: Path) -> list[TrackerWriter]:
    """The writers a job's spec turns on, each writing under the server's trackers dir `root`."""
    writers: list[TrackerWriter] = []
    if spec.tensorboard:
        writers.append(TensorBoardWriter(root / "tensorboard" / f"{job.name}-{job.id}"))
    if spec.wandb is not None:
        writers.append(WandbWriter(spec.wandb, job, root / "wandb"))
    if spec.mlflow is not None:
        writers.append(MlflowWriter(spec.mlflow, job, root / "mlflow"))
    return writers
