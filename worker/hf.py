"""Baton for the Hugging Face `Trainer`: a callback the runtime drives, and exact resume.

The `Trainer` owns its loop, so Baton joins it from the side:

- `BatonCallback` calls the runtime's driver at every step end (the ranks' stop agreement and
  the deadline rule) and sets `should_training_stop` when it says stop; logged losses go into
  the segment's metrics.
- `HFLoopTrainer.write_state` writes what `Trainer` itself writes at a checkpoint (the model,
  optimizer, LR scheduler, grad scaler, per-rank RNG files and `trainer_state.json`) into
  Baton's uncommitted directory; the runtime adds its own RNG file and commits atomically.
- On resume `train(resume_from_checkpoint=...)` restores all of it, with `ignore_data_skip`:
  nothing is replayed. The data position follows from the restored global step instead:
  `StepPositionedSampler` starts where step N left off, in O(1) (transformers #39215, #34053;
  accelerate #4071).
- The Trainer's own bookkeeping chains too: `OnePassEpoch` keeps `state.epoch` on the whole
  job's pass (a resumed `train` would count it from 0 again), and a segment that stops early
  leaves its end-of-train summary out of the saved `log_history`, so the final
  `trainer_state.json` matches an uninterrupted run's step, epoch and log length.

Only trainers that use the Hugging Face `Trainer` import this module (it needs transformers).
"""

from __future__ import annotations

import abc
import copy
import tempfile
from collections.abc import Callable, Iterator, Mapping, Sized
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import torch
from transformers import Trainer as HFTrainer
from transformers import TrainerCallback, TrainerState

from worker.sampler import ResumableSampler
from worker.trainer import LoopDriver, LoopTrainer

if TYPE_CHECKING:
    from torch import Tensor

HF_STATE_DIR = "hf"
TRAINER_STATE_NAME = "trainer_state.json"
# A key only the end-of-train summary that every `train` call logs has.
SUMMARY_LOG_KEY = "train_runtime"


class BatonCallback(TrainerCallback):
    """Asks Baton's runtime after every optimizer step whether to stop, and reports losses."""

    def __init__(self, driver: LoopDriver) -> None:
        self.driver = driver

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
        if self.driver.step_ended(int(state.global_step)):
            control.should_training_stop = True
        return control

    def on_log(
        self, args: Any, state: Any, control: Any, logs: Mapping[str, Any] | None = None, **_: Any
    ) -> Any:
        # Every scalar of a step's or an evaluation's log (eval_loss...); not the end-of-train
        # summary, which each resumed `train` call logs again.
        if logs and SUMMARY_LOG_KEY not in logs:
            scalars = {
                key: float(value)
                for key, value in logs.items()
                if isinstance(value, int | float) and not isinstance(value, bool)
            }
            if scalars:
                self.driver.record_metrics(int(state.global_step), scalars)
        return control


class StepPositionedSampler(torch.utils.data.Sampler[int]):
    """The job's whole data order as one pass, starting where the restored step left off.

    The order is a `ResumableSampler`'s (shuffled per epoch from the seed, sharded by rank).
    At `iter` time, after `Trainer` has restored its state, it jumps straight to sample
    `current_step() * samples_per_step`: no batch is drawn twice and none is skipped one by one.
    """

    def __init__(
        self,
        num_samples: int,
        *,
        seed: int,
        samples_per_step: int,
        total_steps: int,
        current_step: Callable[[], int],
        rank: int = 0,
        world_size: int = 1,
    ) -> None:
        self.order = ResumableSampler(num_samples, seed=seed, rank=rank, world_size=world_size)
        self.samples_per_step = samples_per_step
        self.total_samples = samples_per_step * total_steps
        self.current_step = current_step

    def __len__(self) -> int:
        return self.total_samples

    def __iter__(self) -> Iterator[int]:
        consumed = self.current_step() * self.samples_per_step
        self.order.epoch, self.order.position = divmod(consumed, len(self.order))
        for _ in range(consumed, self.total_samples):
            yield self.order.take(1)[0]


class OnePassEpoch(TrainerCallback):
    """Sets `state.epoch` as an uninterrupted run of the one-pass data order computes it.

    `Trainer` counts an epoch's batches from the start of each `train` call, so every resumed
    segment would log epochs from about 0 again. With `StepPositionedSampler` the job is one
    pass of `steps_in_epoch` batches, and the uninterrupted value at global step g is
    `g * grad_accum / steps_in_epoch`: the same division, so the same float.
    """

    def __init__(self, trainer: PositionedDataTrainer) -> None:
        self.trainer = trainer

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
        batches = self.trainer.steps_in_epoch
        if batches:
            done = min(int(state.global_step) * args.gradient_accumulation_steps, batches)
            state.epoch = done / batches
        return control


class PositionedDataTrainer(HFTrainer):
    """A `transformers.Trainer` whose training data resumes at the restored step.

    The DataLoader gets a private generator: creating its iterator would otherwise draw from
    the global torch RNG, once more on resume than in an uninterrupted run.
    """

    steps_in_epoch: int | None = None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.add_callback(OnePassEpoch(self))

    def get_train_dataloader(self) -> torch.utils.data.DataLoader[Any]:
        args = self.args
        dataset = self.train_dataset
        if not (hasattr(dataset, "__len__") and hasattr(dataset, "__getitem__")):
            raise TypeError("PositionedDataTrainer needs a map-style train_dataset with a length")
        size = len(cast("Sized", dataset))
        dataset = cast("torch.utils.data.Dataset[Any]", dataset)
        per_step = args.per_device_train_batch_size * args.gradient_accumulation_steps
        sampler = StepPositionedSampler(
            size,
            seed=args.seed,
            samples_per_step=per_step,
            total_steps=args.max_steps,
            current_step=lambda: int(self.state.global_step),
            rank=args.process_index,
            world_size=args.world_size,
        )
        loader = torch.utils.data.DataLoader(
            dataset,
            batch_size=args.per_device_train_batch_size,
            sampler=sampler,
            collate_fn=self.data_collator,
            num_workers=0,
            generator=torch.Generator().manual_seed(args.seed),
        )
        self.steps_in_epoch = len(loader)
        return loader


class HFLoopTrainer(LoopTrainer):
    """A Baton trainer around a Hugging Face `Trainer`; subclasses build it in `build_trainer`.

    Build it with `PositionedDataTrainer` (or your subclass of it), `max_steps` equal to the
    job's total_steps, `save_strategy="no"` (Baton decides when to save) and
    `ignore_data_skip=True`; `training_arguments` gives those settings.
    """

    hf: HFTrainer
    _resume_dir: Path | None = None

    @abc.abstractmethod
    def build_trainer(self) -> HFTrainer:
        """The `transformers.Trainer` for this job, built from ctx.config and ctx.seed."""

    def training_arguments(self, **overrides: Any) -> dict[str, Any]:
        """The TrainingArguments settings Baton's resume relies on, plus `overrides`."""
        settings: dict[str, Any] = {
            "output_dir": tempfile.mkdtemp(prefix="baton-hf-"),
            "max_steps": self.ctx.total_steps,
            "save_strategy": "no",
            "ignore_data_skip": True,
            "logging_steps": 1,
            "report_to": "none",
            "disable_tqdm": True,
            "seed": self.ctx.seed,
            "dataloader_num_workers": 0,
        }
        settings.update(overrides)
        return settings

    def setup(self) -> None:
        self.hf = self.build_trainer()

    def run_loop(self, driver: LoopDriver) -> None:
        self.hf.add_callback(BatonCallback(driver))
        resume = str(self._resume_dir) if self._resume_dir is not None else None
        self.hf.train(resume_from_checkpoint=resume)

    def state_dict(self) -> dict[str, Any]:
        # For the runtime's first save-time estimate; write_state saves through the Trainer.
        return {"model": dict(self.model_tensors())}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        return None  # `train(resume_from_checkpoint=...)` restores everything

    def model_tensors(self) -> Mapping[str, Tensor]:
        model = self.hf.accelerator.unwrap_model(self.hf.model)
        tensors: Mapping[str, Tensor] = model.state_dict()
        return tensors

    def write_state(self, directory: Path, state: dict[str, Any]) -> None:
        """What `Trainer._save_checkpoint` writes, minus best-model tracking and hub pushes."""
        out = str(directory / HF_STATE_DIR)
        hf = self.hf
        if hf.optimizer is None:
            prepare_unstarted(hf)
        hf.save_model(out)
        hf._save_optimizer_and_scheduler(out)
        hf._save_scaler(out)
        hf._save_rng_state(out)
        if hf.args.should_save:
            saved = chained_state(hf.state, hf.args.max_steps)
            saved.save_to_json(str(Path(out) / TRAINER_STATE_NAME))

    def read_state(self, directory: Path) -> dict[str, Any]:
        # The files stay where they are; `train` reads them when the loop starts.
        self._resume_dir = directory / HF_STATE_DIR
        return {}


def prepare_unstarted(hf: HFTrainer) -> None:
    """What the loop builds before its first step, for a segment stopped before it began (a
    pause during load, a deadline before the first step): the optimizer and LR schedule,
    untouched, and the state fields a resumed `train` checks against its arguments."""
    args = hf.args
    hf.create_optimizer_and_scheduler(num_training_steps=args.max_steps)
    hf.state.train_batch_size = hf._train_batch_size
    hf.state.max_steps = args.max_steps
    hf.state.compute_steps(args, args.max_steps)  # type: ignore[no-untyped-call]


def chained_state(state: TrainerState, max_steps: int) -> TrainerState:
    """The state to save at a commit: without this `train` call's end-of-train summary unless
    the job is done, since an uninterrupted run logs that summary once, at its end."""
    if state.global_step >= max_steps:
        return state
    saved = copy.copy(state)
    saved.log_history = [entry for entry in state.log_history if SUMMARY_LOG_KEY not in entry]
    return saved
