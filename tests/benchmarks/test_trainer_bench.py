"""The trainer benchmark: which rank wrote each checkpoint file, and its entry point runs."""

import pytest

from benchmarks.trainers import CASES, rank_of
from tests.benchmarks.conftest import EntryPoint


@pytest.mark.parametrize(
    ("name", "rank"),
    [
        ("runtime-rank1.pt", 1),
        ("deepspeed/baton/zero_pp_rank_1_mp_rank_00_optim_states.pt", 1),
        ("deepspeed/baton/zero_pp_rank_0_mp_rank_00_model_states.pt", 0),
        ("accelerate/random_states_1.pkl", 1),
        ("accelerate/custom_checkpoint_1.pkl", 0),  # a registered object, written by rank 0
        ("accelerate/model.safetensors", 0),
        ("hf/rng_state_1.pth", 1),
        ("hf/rng_state.pth", 0),
        ("trainer.pt", 0),
    ],
)
def test_each_file_counts_for_the_rank_that_wrote_it(name, rank):
    assert rank_of(name) == rank


@pytest.mark.timeout(900)
def test_the_benchmark_measures_every_trainer(entry_point: EntryPoint) -> None:
    """`python -m benchmarks.trainers` stays runnable: two steps of each trainer, one row each."""
    table = entry_point("benchmarks.trainers", "--steps", "2", "--no-doc", timeout=840)
    rows = [line for line in table.splitlines() if line.startswith("| ") and "ranks" not in line]
    assert [row.split(" | ")[0].removeprefix("| ") for row in rows] == [
        case.label for case in CASES
    ]
