"""Each trainer's chained-versus-uninterrupted case: its spec, how its segments end, and what else
its checkpoints must show (tests/trainers/test_chained_digest.py runs them all)."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import pytest
import torch

from tests.factories import STEP_SCALE
from tests.support.chains import Chain, ChainRuns, Complete, Deadline, Sigterm, Stop
from tests.support.segments import make_spec
from worker.boundary.contract import Outcome, SegmentResult, SegmentSpec
from worker.boundary.manifest import verify_checkpoint
from worker.checkpoint import runtime_state_file
from worker.hf import HF_STATE_DIR, SUMMARY_LOG_KEY, TRAINER_STATE_NAME
from worker.trainer import TRAINER_STATE_FILE

# Checks of one committed checkpoint (its directory, its segment's result).
SegmentCheck = Callable[[Path, SegmentResult], None]
# Checks of the finished chain against the uninterrupted run (a chain of one segment).
ChainCheck = Callable[[Chain, Chain], None]


@dataclass(frozen=True)
class Case:
    name: str
    spec: SegmentSpec
    plan: list[Stop]
    # The outcomes the chain must start with; it must end COMPLETED after at least 3 segments.
    first_outcomes: list[Outcome]
    # "all": every metric of the chain equals the whole run's, in order; "untimed": the same
    # without how long an evaluation took; "loss": the loss at every step; "logged": each of the
    # whole run's metrics at a step the chain logged too.
    metrics: Literal["all", "untimed", "loss", "logged"] = "all"
    # Each segment trains at least one step (a deadline segment may not, on a slow machine).
    every_segment_trains: bool = True
    timeout: float = 120
    check_segment: SegmentCheck | None = None
    check_chain: ChainCheck | None = None
    marks: list[pytest.MarkDecorator] = field(default_factory=list)


STOPPED_TWICE = [Outcome.STOPPED, Outcome.STOPPED]


# TinyCharLM, its own loop: small enough for ~15 ms steps; stride 256 gives ~20 steps an epoch,
# so the chain crosses epoch boundaries, the LR warmup and the cosine decay.
TINY = Case(
    "tiny_lm",
    make_spec(
        job_id="tiny-lm",
        trainer="trainers.tiny_lm:TinyCharLM",
        config={
            "d_model": 32,
            "n_layer": 2,
            "n_head": 4,
            "block_size": 32,
            "batch_size": 8,
            "stride": 256,
            "warmup_steps": 10,
            "dropout": 0.2,
            "log_every": 5,
            # A floor under the step time: the deadline segment must stop on its deadline, with
            # steps left, however fast the machine is.
            "min_step_seconds": 0.05 * STEP_SCALE,
        },
        total_steps=200,
        seed=3,
    ),
    # Every real way a segment ends: SIGTERM, the session deadline (well under a second of
    # training after its start-up), SIGTERM, completion.
    [Sigterm(past_start=10), Deadline(2.2), Sigterm(past_start=10), Complete()],
    [Outcome.STOPPED, Outcome.DEADLINE],
    metrics="logged",
    every_segment_trains=False,
    marks=[pytest.mark.chained_digest],
)


# The Hugging Face case's steps, and the Trainer's evaluation every EVAL_EVERY of them: its
# eval_loss series is chained too.
HF_STEPS = 12
EVAL_EVERY = 4
HF_EVAL_STEPS = list(range(EVAL_EVERY, HF_STEPS + 1, EVAL_EVERY))


def untimed(metrics: list[dict]) -> list[dict]:
    """The metrics without how long an evaluation took (eval_runtime, ..._per_second)."""
    return [
        {k: v for k, v in m.items() if not k.endswith(("_runtime", "_per_second"))} for m in metrics
    ]


def _hf_trainer_state(checkpoint: Path) -> dict:
    """The Trainer's own state (trainer_state.json) in a committed checkpoint."""
    return json.loads((checkpoint / HF_STATE_DIR / TRAINER_STATE_NAME).read_text())


def _step_logs(state: dict) -> list[dict]:
    return [entry for entry in state["log_history"] if SUMMARY_LOG_KEY not in entry]


def _the_trainers_own_bookkeeping_chains(chain: Chain, whole: Chain) -> None:
    """The HF Trainer logs loss, learning rate and grad norm at every step, and eval_loss at every
    evaluation, as the whole run did; its own state (step, epoch, one log entry per step and
    evaluation) chains too."""
    chained = [m for r in chain.results for m in r.metrics]
    assert [m["step"] for m in chained if "loss" in m] == list(range(1, HF_STEPS + 1))
    evals = [(m["step"], m["eval_loss"]) for m in chained if "eval_loss" in m]
    assert [step for step, _ in evals] == HF_EVAL_STEPS
    whole_metrics = whole.results[0].metrics
    assert evals == [(m["step"], m["eval_loss"]) for m in whole_metrics if "eval_loss" in m]
    final = _hf_trainer_state(chain.checkpoint)
    expected = _hf_trainer_state(whole.checkpoint)
    assert (final["global_step"], final["epoch"]) == (HF_STEPS, 1.0)
    assert (final["global_step"], final["epoch"]) == (expected["global_step"], expected["epoch"])
    entries = HF_STEPS + len(HF_EVAL_STEPS) + 1  # steps, evaluations, the summary
    assert len(final["log_history"]) == len(expected["log_history"]) == entries
    assert untimed(_step_logs(final)) == untimed(_step_logs(expected))


# The Hugging Face Trainer, joined by Baton's callback; steps padded to a fixed time, so a
# SIGTERM after a logged step lands well before the end.
HF = Case(
    "hf_lm",
    make_spec(
        job_id="hf-lm",
        trainer="trainers.hf_lm:HFCausalLM",
        config={"step_seconds": 0.25, "grad_accum": 2, "eval_every": EVAL_EVERY},
        total_steps=HF_STEPS,
        seed=11,
    ),
    [Sigterm(step=3), Sigterm(step=7), Complete()],
    STOPPED_TWICE,
    metrics="untimed",
    check_chain=_the_trainers_own_bookkeeping_chains,
)

LORA_CONFIG = {"r": 4, "alpha": 8, "dropout": 0.1, "target_modules": ["q_proj", "v_proj"]}
# 2 layers x 2 modules x (A: 4 x 64 + B: 64 x 4) adapter parameters.
ADAPTER_PARAMS = 2 * 2 * (4 * 64 + 64 * 4)


def _only_the_adapters_are_saved(chain: Chain, whole: Chain) -> None:
    manifest = verify_checkpoint(chain.checkpoint)
    state = torch.load(chain.checkpoint / TRAINER_STATE_FILE, weights_only=True)
    assert set(state) == {"adapter", "optimizer", "scheduler", "sampler"}
    assert all("lora_" in name for name in state["adapter"])
    assert sum(t.numel() for t in state["adapter"].values()) == ADAPTER_PARAMS
    moments = [t for s in state["optimizer"]["state"].values() for t in s.values() if t.dim()]
    assert sum(t.numel() for t in moments) == 2 * ADAPTER_PARAMS  # Adam: two per adapter weight
    # fp32 adapters plus two fp32 moments, and a little pickling and RNG state on top.
    payload = 3 * 4 * ADAPTER_PARAMS
    assert payload <= manifest.files[TRAINER_STATE_FILE].bytes <= payload + 16_384
    assert manifest.total_bytes < payload + 40_000  # the frozen base model is never saved


# LoRA through peft: the checkpoint holds only the adapters and their optimizer state.
LORA = Case(
    "lora_lm",
    make_spec(
        job_id="lora-lm",
        trainer="trainers.lora_lm:LoraCausalLM",
        config={"log_every": 1, "step_seconds": 0.25, "lora": LORA_CONFIG},
        total_steps=12,
        seed=13,
    ),
    [Sigterm(step=3), Sigterm(step=7), Complete()],
    STOPPED_TWICE,
    check_chain=_only_the_adapters_are_saved,
)


def _every_rank_optimizer_partition_committed(checkpoint: Path, result: SegmentResult) -> None:
    """Every rank's optimizer partition is part of the one commit."""
    files = verify_checkpoint(checkpoint).files
    assert {f for f in files if f.endswith("optim_states.pt")} == {
        f"deepspeed/baton/zero_pp_rank_{rank}_mp_rank_00_optim_states.pt" for rank in (0, 1)
    }


def deepspeed_case(stage: int) -> Case:
    """DeepSpeed ZeRO-`stage` on two CPU ranks (gloo, torch_adam)."""
    return Case(
        f"deepspeed_zero{stage}",
        make_spec(
            job_id=f"zero{stage}",
            trainer="trainers.deepspeed_lm:DeepSpeedCausalLM",
            config={"log_every": 1, "step_seconds": 0.3, "zero_stage": stage},
            total_steps=10,
            seed=17,
            nproc=2,
        ),
        [Sigterm(step=2), Sigterm(step=5), Complete()],
        STOPPED_TWICE,
        timeout=600,
        check_segment=_every_rank_optimizer_partition_committed,
        # eight two-rank sessions, each importing DeepSpeed in every rank
        marks=[pytest.mark.timeout(1800)],
    )


ACCELERATE_RANKS = 2


def rank_steps(checkpoint: Path) -> list[int]:
    """The step each rank recorded as its own stop step in the committed checkpoint."""
    return [
        int(torch.load(checkpoint / runtime_state_file(rank), weights_only=True)["step"])
        for rank in range(ACCELERATE_RANKS)
    ]


def _both_ranks_stopped_at_the_commit(checkpoint: Path, result: SegmentResult) -> None:
    """Both ranks stopped at the step rank 0 committed."""
    manifest = verify_checkpoint(checkpoint)
    assert manifest.step == result.end_step
    assert rank_steps(checkpoint) == [manifest.step] * ACCELERATE_RANKS


# Two CPU ranks under torchrun through the accelerate trainer; steps padded to a fixed duration,
# so a SIGTERM sent after a logged step always lands several steps before the end.
ACCELERATE = Case(
    "accelerate_lm",
    make_spec(
        job_id="acc-lm",
        trainer="trainers.accelerate_lm:AccelerateCausalLM",
        config={
            "log_every": 1,
            "step_seconds": 0.25,
            "grad_accum": 2,
            "gradient_checkpointing": True,
        },
        total_steps=14,
        seed=5,
        nproc=ACCELERATE_RANKS,
    ),
    [Sigterm(step=3), Sigterm(past_start=3), Complete()],
    STOPPED_TWICE,
    metrics="loss",
    check_segment=_both_ranks_stopped_at_the_commit,
)

CASES = [TINY, HF, LORA, deepspeed_case(2), deepspeed_case(3), ACCELERATE]


def first_segment(runs: ChainRuns, case: Case) -> Chain:
    """The case's segment 0, shared with other tests of the same trainer."""
    return runs.first_segment(case.name, case.spec, case.plan[0], case.timeout)
