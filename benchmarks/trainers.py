"""`python -m benchmarks.trainers`: checkpoint cost per trainer and its 12 h projection.

Runs one real segment of each of Baton's trainers (through `python -m worker`, with its ranks)
and reads back what it measured: step time, save time, the committed bytes per rank. Then
projects each onto a 12 h Kaggle session with the default deadline margin, at the measured step
time and at the seed guides' 150 s steps. Writes docs/trainer-benchmarks.md.
"""

from __future__ import annotations

import argparse
import platform
import re
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from benchmarks.projection import KAGGLE_SESSION_SECONDS, Costs, project_baton
from tests.support.segments import make_root, make_spec, output_checkpoint, read_result, run_worker
from worker.boundary.manifest import verify_checkpoint

REPO_ROOT = Path(__file__).resolve().parent.parent
DOC = REPO_ROOT / "docs" / "trainer-benchmarks.md"
GUIDE_STEP_SECONDS = 150.0
# A file belongs to the rank its name says (runtime-rank1.pt, zero_pp_rank_1_..., *_1.pkl,
# rng_state_1.pth); shared files are rank 0's, which writes them.
RANK_IN_NAME = re.compile(
    r"runtime-rank(\d+)\.pt$|zero_pp_rank_(\d+)_|random_states_(\d+)\.pkl$|rng_state_(\d+)\.pth$"
)


@dataclass(frozen=True)
class Case:
    label: str
    trainer: str
    nproc: int
    config: dict[str, object]


CASES = (
    Case("tiny_lm (own loop)", "trainers.tiny_lm:TinyCharLM", 1, {}),
    Case("accelerate DDP", "trainers.accelerate_lm:AccelerateCausalLM", 2, {}),
    Case("HF Trainer + callback", "trainers.hf_lm:HFCausalLM", 1, {}),
    Case("DeepSpeed ZeRO-2", "trainers.deepspeed_lm:DeepSpeedCausalLM", 2, {"zero_stage": 2}),
    Case("DeepSpeed ZeRO-3", "trainers.deepspeed_lm:DeepSpeedCausalLM", 2, {"zero_stage": 3}),
    Case("LoRA (peft)", "trainers.lora_lm:LoraCausalLM", 1, {"lora": {"r": 8}}),
)


@dataclass(frozen=True)
class Measured:
    case: Case
    step_seconds: float
    save_seconds: float
    fixed_seconds: float  # start-up plus load
    bytes_per_rank: tuple[int, ...]
    wall_seconds: float

    def share(self, step_seconds: float) -> float:
        costs = Costs(step=step_seconds, startup=self.fixed_seconds, save=self.save_seconds)
        return project_baton(self.case.label, KAGGLE_SESSION_SECONDS, costs).in_step_share


def rank_of(name: str) -> int:
    found = RANK_IN_NAME.search(name)
    if found is None:
        return 0
    return int(next(group for group in found.groups() if group is not None))


def measure(case: Case, steps: int, workdir: Path) -> Measured:
    spec = make_spec(
        job_id=case.label.split()[0].lower(),
        trainer=case.trainer,
        config={"log_every": steps, **case.config},
        total_steps=steps,
        nproc=case.nproc,
    )
    root = make_root(workdir / spec.job_id / str(len(case.config)), spec)
    started = time.monotonic()
    finished = run_worker(root, timeout=900)
    wall = time.monotonic() - started
    if finished.returncode != 0:
        raise RuntimeError(f"{case.label} failed:\n{finished.stderr[-3000:]}")
    result = read_result(root, spec)
    manifest = verify_checkpoint(output_checkpoint(root, spec))
    per_rank = [0] * case.nproc
    for name, entry in manifest.files.items():
        per_rank[min(rank_of(name), case.nproc - 1)] += entry.bytes
    timings = result.timings
    return Measured(
        case=case,
        step_seconds=timings.train / max(1, result.end_step - result.start_step),
        save_seconds=timings.save,
        fixed_seconds=timings.startup + timings.load,
        bytes_per_rank=tuple(per_rank),
        wall_seconds=wall,
    )


def table(rows: list[Measured]) -> str:
    lines = [
        "| trainer | ranks | step | save | bytes per rank | start-up + load "
        "| 12 h in steps (measured step) | 12 h in steps (150 s steps) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        per_rank = " / ".join(f"{b / 1e3:,.0f} kB" for b in row.bytes_per_rank)
        lines.append(
            f"| {row.case.label} | {row.case.nproc} | {row.step_seconds * 1e3:.0f} ms "
            f"| {row.save_seconds:.2f} s | {per_rank} | {row.fixed_seconds:.1f} s "
            f"| {row.share(row.step_seconds):.2%} | {row.share(GUIDE_STEP_SECONDS):.2%} |"
        )
    return "\n".join(lines)


def render(rows: list[Measured], steps: int) -> str:
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    import torch

    return f"""# Trainer benchmarks

`python -m benchmarks.trainers` runs one segment of {steps} steps of each trainer through
`python -m worker` (its ranks under torchrun) on CPU, then projects it onto a 12 h Kaggle session
with the default deadline margin (`benchmarks/projection.py`). Models are the tiny
LlamaForCausalLM the trainers build from their config (about 0.1 M parameters), so the absolute
times say little about a T4; what compares is the overhead around the steps.

Measured {when} on {platform.machine()}, {platform.system()}, torch {torch.__version__}, shared
2-core machine (other developers' tests running). Start-up + load includes importing
transformers/accelerate/DeepSpeed in each rank.

{table(rows)}

- step: training time / steps of the segment; save: Baton's whole commit (every rank's files,
  the barrier, the manifest, the rename).
- bytes per rank: committed bytes by the rank that wrote them (shared files count for rank 0).
  LoRA saves the adapters and their optimizer state only.
- 12 h in steps: project_baton with the measured start-up + load and save; the 150 s column
  uses the seed guides' step time on 2x T4 with the same costs.
- DeepSpeed ZeRO-2 took 14 s a step here until 2026-11-28: ZeRO-2 allocated and cleared its
  gradient bucket at DeepSpeed's default of 5e8 elements every step, for a model of 0.1 M
  parameters. The buckets are now the model's size (`trainers.deepspeed_lm.bucket_sizes`); the
  weights a run ends with are bitwise the same.
"""


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.trainers")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--no-doc", action="store_true", help="print only")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="baton-trainer-bench-") as tmp:
        rows = [measure(case, args.steps, Path(tmp)) for case in CASES]
    print(table(rows))
    if not args.no_doc:
        DOC.write_text(render(rows, args.steps))


if __name__ == "__main__":
    main()
