"""Runs one segment: verify the resume checkpoint, train until done, deadline or stop, commit.

Exit codes: 0 a checkpoint was committed (completed, deadline, stopped); 1 failed (nothing
committed); 2 rejected (the resume checkpoint is missing, corrupt or not the expected one; the
worker never falls back to training from scratch).
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from worker.boundary.contract import (
    COMMITTED_OUTCOMES,
    READY_LOG,
    STARTUP_LOG,
    Outcome,
    SegmentResult,
    SegmentSpec,
    write_json_atomic,
)
from worker.boundary.heartbeat import Heartbeat, live_metrics
from worker.boundary.manifest import CorruptCheckpoint, Manifest, verify_checkpoint
from worker.boundary.paths import HEARTBEAT_FILE, RESULT_FILE, SEGMENT_FILE, SessionPaths
from worker.checkpoint import (
    commit_checkpoint,
    read_checkpoint,
    recommit_checkpoint,
    state_nbytes,
)
from worker.control import LOCAL_CONTROL_SECONDS, Command, ControlFile, ControlPoller
from worker.deadline import SessionBudget
from worker.distributed import (
    DEFAULT_COLLECTIVE_TIMEOUT_SECONDS,
    GO_ON,
    STOP_CANCELLED,
    STOP_COMPLETED,
    STOP_DEADLINE,
    STOP_DIVERGED,
    STOP_FLAG,
    RankGroup,
    RankInfo,
    SingleProcess,
    join_rank_group,
    launched_by_torchrun,
)
from worker.launch import launch_ranks
from worker.proctime import process_start_time
from worker.rank_notes import await_peer_failure, peer_failure, write_rank_note
from worker.reasons import one_line, reason_for
from worker.rng import capture_rng_state, restore_rng_state, seed_everything
from worker.stopflag import StopFlag
from worker.trainer import LoopTrainer, TrainContext, Trainer
from worker.watchdog import (
    WATCHED_METRICS,
    DivergenceCounter,
    HangWatch,
    divergence_reason,
    dump_stacks_and_exit,
)

EXIT_COMMITTED = 0
EXIT_FAILED = 1
EXIT_REJECTED = 2

DEFAULT_LOG_EVERY = 10
# The heartbeat (live progress for the orchestrator) is rewritten at most this often.
HEARTBEAT_SECONDS = 1.0

log = logging.getLogger("worker")


def exit_code_for(outcome: str) -> int:
    if outcome in COMMITTED_OUTCOMES:
        return EXIT_COMMITTED
    if outcome == Outcome.REJECTED:
        return EXIT_REJECTED
    return EXIT_FAILED


def import_trainer(entry: str) -> type[Trainer]:
    """Resolve "package.module:ClassName" to a Trainer subclass."""
    module_name, sep, class_name = entry.partition(":")
    if not sep or not module_name or not class_name:
        raise ValueError(f"trainer must look like 'package.module:ClassName', got {entry!r}")
    cls = getattr(importlib.import_module(module_name), class_name)
    if not (isinstance(cls, type) and issubclass(cls, Trainer)):
        raise TypeError(f"{entry} is not a worker.Trainer subclass")
    return cls


def configure_torch(config: Mapping[str, Any]) -> None:
    """Deterministic kernels and a fixed thread count: both are part of a bitwise resume."""
    import torch

    if config.get("deterministic", True):
        # cuBLAS needs this set before its first call to be deterministic.
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        use_deterministic_algorithms()
        torch.backends.cudnn.benchmark = False
    torch.set_num_threads(int(config.get("threads", 1)))


def use_deterministic_algorithms() -> None:
    """What `torch.use_deterministic_algorithms(True)` does, without importing TorchInductor for a
    trainer that never compiles. The public call sets Inductor's `deterministic` flag by importing
    torch._inductor, and with it torch._dynamo and sympy: about 1.1 s of CPU and 74 MB in every
    rank of every session. Inductor reads the same flag from its environment variable when a
    trainer first compiles."""
    import torch

    if "torch._inductor.config" in sys.modules:  # already imported: nothing left to save
        torch.use_deterministic_algorithms(True)
        return
    os.environ["TORCHINDUCTOR_DETERMINISTIC"] = "1"
    torch._C._set_deterministic_algorithms(True)


_STOP_OUTCOMES: dict[int, str | None] = {
    GO_ON: None,
    STOP_DEADLINE: Outcome.DEADLINE,
    STOP_FLAG: Outcome.STOPPED,
    STOP_COMPLETED: Outcome.COMPLETED,
    STOP_DIVERGED: Outcome.DIVERGED,
    STOP_CANCELLED: Outcome.CANCELLED,
}


@dataclass
class _Progress:
    """Where the loop stands; what result.json reports if anything goes wrong mid-way."""

    step: int
    train_seconds: float = 0.0
    last_beat: float | None = None  # clock reading of the last heartbeat


class SegmentRunner:
    """One segment, start to finish. The clock and the stop flag are the seams tests replace."""

    def __init__(
        self,
        spec: SegmentSpec,
        root: Path,
        *,
        process_start: float,
        clock: Callable[[], float],
        stop_flag: StopFlag,
        group: RankGroup | None = None,
        control: ControlPoller | None = None,
    ) -> None:
        self.spec = spec
        self.control = control
        self.group = group or SingleProcess()
        self.root = root
        self.output_dir = root / spec.output_dir
        self.paths = SessionPaths(root)
        self.process_start = process_start
        self.clock = clock
        self.stop_flag = stop_flag
        self.budget = SessionBudget.for_session(
            process_start, spec.limit_seconds, spec.margin, spec.estimates
        )
        start_step = spec.expect.step if spec.expect else 0
        self.result = SegmentResult(
            job_id=spec.job_id,
            segment_index=spec.segment_index,
            outcome=Outcome.FAILED,
            start_step=start_step,
            end_step=start_step,
            limit_seconds=spec.limit_seconds,
        )
        self.progress = _Progress(step=start_step)
        self.given: Manifest | None = None  # the verified checkpoint this segment resumed from
        self.divergence = DivergenceCounter(spec.watchdog.divergence_steps)
        self.diverged = False
        # Real elapsed time, whatever clock the deadline reads: a hang is wall time.
        self.hang_watch = HangWatch(spec.watchdog, time.monotonic, self._end_hung)

    def run(self) -> SegmentResult:
        """Run the segment and write result.json; never raises for trainer errors."""
        timings = self.result.timings
        timings.startup = self.clock() - self.process_start
        try:
            trainer = self._load()
            self.result.outcome = self._train(trainer)
            if self.result.outcome == Outcome.DIVERGED:
                self._report_divergence()
            elif self.result.outcome == Outcome.CANCELLED:
                log.info("cancelled by the job's owner; nothing committed")
            else:
                self._commit(trainer)
        except CorruptCheckpoint as exc:
            log.error("resume checkpoint rejected: %s", exc)
            self.result.outcome = Outcome.REJECTED
            self.result.error = one_line(str(exc))
        except Exception as exc:
            log.exception("segment failed at step %d", self.progress.step)
            self.result.outcome = Outcome.FAILED
            # The traceback is in the session log (log.exception above); users read one line.
            # A broken collective is a symptom: a peer that failed first says why.
            self.result.error = peer_failure(self.paths, self.group.info.rank) or reason_for(exc)
            if not self.group.info.is_main:
                write_rank_note(self.paths, self.group.info.rank, self.result.error)
        # Only committed steps count: the next segment resumes from the committed checkpoint.
        if self.result.committed:
            self.result.end_step = self.progress.step
        timings.train = self.progress.train_seconds
        self.result.step_time_ema = self.budget.step_ema
        return self._finish()

    def _verify_resume(self) -> Manifest | None:
        spec = self.spec
        if spec.resume_path is None:
            if spec.expect is not None:
                raise CorruptCheckpoint("spec expects a checkpoint but gives no resume_path")
            return None
        if spec.expect is None:
            raise CorruptCheckpoint("resume_path given without expect: staleness is uncheckable")
        return verify_checkpoint(self.root / spec.resume_path, spec.expect)

    def _load(self) -> Trainer:
        """Verify, build and restore the trainer; verification first so a bad input fails fast."""
        started = self.clock()
        spec = self.spec
        manifest = self.given = self._verify_resume()
        if manifest is not None:
            log.info("%s resume checkpoint verified (step %d)", STARTUP_LOG, manifest.step)
        configure_torch(spec.config)
        seed_everything(spec.seed)
        trainer_cls = import_trainer(spec.trainer)
        trainer = trainer_cls(self._context())
        log.info("%s setting up %s", STARTUP_LOG, spec.trainer)
        trainer.setup()
        if manifest is not None and spec.resume_path is not None:
            resume = read_checkpoint(
                self.root / spec.resume_path, manifest, trainer.read_state, self.group.info.rank
            )
            trainer.load_state_dict(resume.trainer)
            log.info("resumed from step %d", manifest.step)
            # Last, so nothing between here and the first step draws from the restored streams.
            restore_rng_state(resume.rng)
            self.budget.record_state_size(manifest.total_bytes)
        elif spec.estimates.save_seconds is None:
            self.budget.record_state_size(state_nbytes(trainer.state_dict()))
        self.result.timings.load = self.clock() - started
        log.info(
            "%s at step %d after %.1f s (load %.1f s)",
            READY_LOG,
            self.progress.step,
            self.clock() - self.process_start,
            self.result.timings.load,
        )
        return trainer

    def _context(self) -> TrainContext:
        spec = self.spec
        return TrainContext(
            config=spec.config,
            seed=spec.seed,
            job_id=spec.job_id,
            segment_index=spec.segment_index,
            total_steps=spec.total_steps,
            start_step=self.progress.step,
            rank=self.group.info.rank,
            world_size=self.group.info.world_size,
            logger=logging.getLogger("worker.trainer"),
        )

    def _stop_reason(self) -> str | None:
        """This step's stop decision, the same on every rank: the MAX of what each proposes."""
        return _STOP_OUTCOMES[self.group.agree_stop(self._local_stop_code())]

    def _local_stop_code(self) -> int:
        command = self.control.poll() if self.control is not None else None
        if command is Command.CANCEL:
            return STOP_CANCELLED
        if self.diverged:
            return STOP_DIVERGED
        if self.progress.step >= self.spec.total_steps:
            return STOP_COMPLETED
        if self.stop_flag.is_set or command is Command.PAUSE:
            return STOP_FLAG
        if self.budget.should_stop(self.clock()):
            return STOP_DEADLINE
        return GO_ON

    def _train(self, trainer: Trainer) -> str:
        self.hang_watch.beat(self.progress.step, self.spec.estimates.step_seconds)
        self.hang_watch.start()
        try:
            if isinstance(trainer, LoopTrainer):
                return self._drive_loop(trainer)
            return self._run_steps(trainer)
        finally:
            self.hang_watch.stop()

    def _run_steps(self, trainer: Trainer) -> str:
        log_every = max(1, int(self.spec.config.get("log_every", DEFAULT_LOG_EVERY)))
        metrics: dict[str, float] = {}
        while (reason := self._stop_reason()) is None:
            started = self.clock()
            step_metrics = trainer.train_step(self.progress.step)
            elapsed = self.clock() - started
            self.budget.record_step(elapsed)
            self.progress.train_seconds += elapsed
            self.progress.step += 1
            metrics = {"step": self.progress.step}
            metrics.update({key: float(value) for key, value in step_metrics.items()})
            self._watch_step(metrics)
            if self.progress.step % log_every == 0 or self.divergence.streak:
                self._record(metrics)
            # started + elapsed is the step's end, without another reading of the clock.
            self._beat(started + elapsed, metrics)
        if metrics and self.result.metrics[-1:] != [metrics]:
            self._record(metrics)  # the segment's last step, whatever log_every says
        log.info("stopping at step %d: %s", self.progress.step, reason)
        return reason

    def _drive_loop(self, trainer: LoopTrainer) -> str:
        """Hand the loop to the trainer's library; the driver answers its every step end."""
        reason = self._stop_reason()
        if reason is None:
            driver = _RunnerDriver(self)
            trainer.run_loop(driver)
            reason = driver.reason or self._stop_reason()
            if reason is None:
                raise RuntimeError(
                    f"the training loop returned at step {self.progress.step} without being "
                    f"asked to stop, before total_steps {self.spec.total_steps}"
                )
        log.info("stopping at step %d: %s", self.progress.step, reason)
        return reason

    def _watch_step(self, metrics: Mapping[str, float]) -> None:
        """After a step: the hang watch sees it, the divergence count sees its loss."""
        self.hang_watch.beat(self.progress.step, self.budget.step_seconds)
        if self.divergence.record(self.progress.step, metrics):
            self.diverged = True

    def _report_divergence(self) -> None:
        diverged_at = self.divergence.first_bad_step or self.progress.step
        last_good = self.given.step if self.given is not None else None
        self.result.error = divergence_reason(diverged_at, last_good)
        log.error("%s; nothing committed", self.result.error)

    def _end_hung(self, reason: str) -> None:
        """The hang watch's action (its thread): stacks to the log, the reason on disk, exit."""

        def leave_reason() -> None:
            if self.group.info.is_main:
                # Every rank's watch fires within a poll of the others; a peer's reason is the
                # cause when this rank only waited for it in a collective.
                wait = 0.0 if self.group.info.world_size == 1 else 3 * self.hang_watch.poll_seconds
                self.result.outcome = Outcome.FAILED
                self.result.error = await_peer_failure(self.paths, 0, wait) or reason
                self._finish()
            else:
                write_rank_note(self.paths, self.group.info.rank, reason)

        dump_stacks_and_exit(reason, EXIT_FAILED, leave_reason)

    def _beat(self, now: float, metrics: Mapping[str, float] | None) -> None:
        """Rewrite working/heartbeat.json after the first step, then at most every second."""
        last = self.progress.last_beat
        if not self.group.info.is_main:
            return  # one writer: the ranks would race on the same temp file
        if last is not None and now - last < HEARTBEAT_SECONDS:
            return
        self.progress.last_beat = now
        self.output_dir.mkdir(parents=True, exist_ok=True)
        loss = metrics.get("loss") if metrics else None
        beat = Heartbeat(
            step=self.progress.step,
            at=now,
            loss=float(loss) if loss is not None else None,
            step_seconds=self.budget.step_ema,
            # Where the session's time went so far: the page draws a running session by phase.
            phases={
                "startup": self.result.timings.startup,
                "load": self.result.timings.load,
                "train": self.progress.train_seconds,
            },
            metrics=live_metrics(metrics),
        )
        write_json_atomic(self.output_dir / HEARTBEAT_FILE, beat.to_json())

    def _record(self, metrics: dict[str, float]) -> None:
        self.result.metrics.append(metrics)
        shown = " ".join(f"{key}={value:.6g}" for key, value in metrics.items() if key != "step")
        log.info("step %d/%d %s", int(metrics["step"]), self.spec.total_steps, shown)

    def _commit(self, trainer: Trainer) -> None:
        started = self.clock()
        given, spec = self.given, self.spec
        if given is not None and spec.resume_path is not None and given.step == self.progress.step:
            # No step taken: the state it was given is the state to commit, whatever the API.
            manifest = recommit_checkpoint(
                self.root / spec.resume_path,
                given,
                self.output_dir,
                spec.segment_index,
                self.group,
            )
        else:
            manifest = commit_checkpoint(
                self.output_dir,
                trainer,
                self.progress.step,
                capture_rng_state(),
                spec.job_id,
                spec.segment_index,
                self.group,
            )
        self.result.timings.save = self.clock() - started
        self.result.model_digest = manifest.model_digest
        log.info("committed checkpoint at step %d (%d bytes)", manifest.step, manifest.total_bytes)

    def _finish(self) -> SegmentResult:
        self.result.timings.total = self.clock() - self.process_start
        if self.group.info.is_main:  # one result per segment, whatever the rank count
            self.output_dir.mkdir(parents=True, exist_ok=True)
            self.result.write(self.output_dir / RESULT_FILE)
        return self.result


class _RunnerDriver:
    """The LoopDriver a LoopTrainer's callback calls: step times, metrics and the stop."""

    def __init__(self, runner: SegmentRunner) -> None:
        self.runner = runner
        self.reason: str | None = None
        self.step_started = runner.clock()
        self.latest: dict[str, float] = {}  # what the loop logged last, for the heartbeat

    def step_ended(self, step: int) -> bool:
        runner = self.runner
        now = runner.clock()
        elapsed = now - self.step_started
        runner.budget.record_step(elapsed)
        runner.progress.train_seconds += elapsed
        runner.progress.step = step
        runner.hang_watch.beat(step, runner.budget.step_seconds)
        runner._beat(now, self.latest)
        self.reason = runner._stop_reason()
        self.step_started = runner.clock()
        return self.reason is not None

    def record_metrics(self, step: int, metrics: Mapping[str, float]) -> None:
        # The Trainer logs a step after asking whether to stop: a divergence stops the next.
        self.runner._record({"step": step, **{key: float(v) for key, v in metrics.items()}})
        self.latest = {**self.latest, **{key: float(v) for key, v in metrics.items()}}
        # An evaluation's log says nothing about the step's loss: it neither breaks nor extends
        # a run of non-finite steps.
        watched = any(key in metrics for key in WATCHED_METRICS)
        if watched and self.runner.divergence.record(step, metrics):
            self.runner.diverged = True


def main(argv: list[str] | None = None) -> int:
    """`python -m worker --root DIR`: run the segment described by DIR/segment.json."""
    parser = argparse.ArgumentParser(prog="python -m worker", description=__doc__)
    parser.add_argument("--root", type=Path, default=Path.cwd(), help="session root directory")
    parser.add_argument(
        "--started-at",
        type=float,
        default=None,
        help="epoch seconds when the session began (default: this process's start)",
    )
    args = parser.parse_args(argv)
    logging.basicConfig(
        stream=sys.stderr,
        level=logging.INFO,
        format="%(asctime)s %(name)s %(levelname)s %(message)s",
    )
    process_start = args.started_at if args.started_at is not None else process_start_time()
    root: Path = args.root.resolve()
    try:
        spec = SegmentSpec.read(root / SEGMENT_FILE)
    except (OSError, ValueError, TypeError) as exc:
        log.error("cannot read %s: %s", root / SEGMENT_FILE, exc)
        return EXIT_FAILED
    # Start-up progress reaches the log line by line: a session killed while it is still
    # starting shows how far it got instead of an empty log.
    log.info(
        "%s segment %d of %s, %d rank(s), limit %.0f s",
        STARTUP_LOG,
        spec.segment_index,
        spec.job_id,
        spec.nproc,
        spec.limit_seconds,
    )
    # A trainer module shipped inside the session root imports like one next to a script.
    sys.path.append(str(root))
    if spec.nproc > 1 and not launched_by_torchrun():
        result = launch_ranks(spec, root, process_start)
    else:
        result = run_rank(spec, root, process_start)
    log.info("segment %d of %s: %s", spec.segment_index, spec.job_id, result.outcome)
    return exit_code_for(result.outcome)


def run_rank(spec: SegmentSpec, root: Path, process_start: float) -> SegmentResult:
    """This process's part of the segment: the whole of it, or one rank of several."""
    info = RankInfo.from_environ()
    if info.world_size != spec.nproc:
        raise SystemExit(
            f"segment wants {spec.nproc} ranks, the launcher started {info.world_size}"
        )
    if info.world_size > 1:
        rank_format = f"%(asctime)s rank{info.rank} %(name)s %(levelname)s %(message)s"
        for handler in logging.getLogger().handlers:
            handler.setFormatter(logging.Formatter(rank_format))
    with StopFlag() as stop_flag:
        log.info("%s importing torch", STARTUP_LOG)
        import torch  # (counted as startup: it is a fixed cost of every session)

        log.info("%s torch %s imported", STARTUP_LOG, torch.__version__)

        timeout = float(
            spec.config.get("collective_timeout_seconds", DEFAULT_COLLECTIVE_TIMEOUT_SECONDS)
        )
        group = join_rank_group(info, timeout)
        runner = SegmentRunner(
            spec,
            root,
            process_start=process_start,
            clock=time.time,
            stop_flag=stop_flag,
            group=group,
            control=control_for(root, info),
        )
        return runner.run()


def control_for(root: Path, info: RankInfo) -> ControlPoller | None:
    """Rank 0 listens; the stop agreement carries what it hears to the other ranks."""
    if not info.is_main:
        return None
    return ControlPoller(
        ControlFile(SessionPaths(root).control), LOCAL_CONTROL_SECONDS, time.monotonic
    )
