"""The memory planner against published figures, each with its tolerance stated."""

import subprocess
import sys

import pytest
from pydantic import ValidationError

from orchestrator.spec import JobSpec
from tests.factories import kaggle_spec
from tests.support.segments import REPO_ROOT
from trainers.memory_plan import (
    GB,
    ModelShape,
    TrainingSetup,
    check_t4_job,
    plan_memory,
    suggest_fit,
)

TINY = ModelShape(layers=2, hidden=64, heads=4, vocab=128)


def states(setup: TrainingSetup) -> float:
    plan = plan_memory(setup)
    return plan.weights + plan.gradients + plan.optimizer


@pytest.mark.parametrize("precision", ["fp16", "bf16", "fp32"])
def test_adam_costs_16_bytes_per_parameter(precision):
    # ZeRO paper, section 3.1: mixed-precision Adam holds 2 + 2 + 12 bytes per parameter.
    setup = TrainingSetup(TINY, batch=1, seq_len=8, precision=precision, params=1_000_000)
    assert states(setup) == pytest.approx(16 * 1_000_000)


@pytest.mark.parametrize(
    ("stage", "published_gb"),
    [(0, 120.0), (1, 31.4), (2, 16.6), (3, 1.9)],
)
def test_zero_stages_match_the_papers_figure_1(stage, published_gb):
    # ZeRO paper, Figure 1: 7.5B parameters, 64 GPUs, K = 12. Tolerance 3 % (the paper rounds).
    setup = TrainingSetup(
        TINY, batch=1, seq_len=8, params=7_500_000_000, zero_stage=stage, ranks=64
    )
    assert states(setup) / GB == pytest.approx(published_gb, rel=0.03)


def test_the_guides_1_7_gb_model_states_and_peak_at_batch_3():
    # Kaggle guide 001: a 1.7 GB (fp32, ~425M parameters) model: weights 1.7, gradients 1.7,
    # AdamW 3.4 GB (tolerance 2 %), peak about 11-12 GB at batch 3 on a T4 with fp16 autocast.
    # The guide gives no shape; we take a BERT-large-like one (24 layers, 1024 wide, 16 heads,
    # 512 tokens, 32k vocab): tolerance 10 % of the range's middle, 11.5 GB.
    shape = ModelShape(layers=24, hidden=1024, heads=16, vocab=32_000)
    setup = TrainingSetup(shape, batch=3, seq_len=512, precision="fp32", params=425_000_000)
    plan = plan_memory(setup)
    assert plan.weights / GB == pytest.approx(1.7, rel=0.02)
    assert plan.gradients / GB == pytest.approx(1.7, rel=0.02)
    assert plan.optimizer / GB == pytest.approx(3.4, rel=0.02)
    autocast = plan_memory(TrainingSetup(shape, 3, 512, precision="fp16", params=425_000_000))
    assert autocast.total / GB == pytest.approx(11.5, rel=0.10)
    assert autocast.fits()


def test_a_run_that_does_not_fit_gets_the_cheapest_change_that_does():
    # A 1.5B full fine-tune at batch 8 x 1024 tokens on one T4: far over 16 GB.
    shape = ModelShape(layers=28, hidden=1536, heads=12, vocab=151_936, intermediate=8960)
    setup = TrainingSetup(shape, batch=8, seq_len=1024, precision="fp16", ranks=2)
    advice = suggest_fit(setup)
    assert not advice.fits
    assert advice.fitted is not None
    assert advice.fitted.fits()
    assert advice.changes[0] == "enable gradient checkpointing"
    assert "will not fit" in advice.message()
    assert "Cheapest change" in advice.message()
    # Sharding across the two T4s comes before training fewer weights.
    assert "raise the ZeRO stage 0 -> 3" in advice.changes
    assert "per-GPU batch 8 -> 1 (grad_accum x8 keeps the effective batch)" in advice.changes
    assert not any("LoRA" in change for change in advice.changes)


def test_a_fitting_run_needs_no_change():
    advice = suggest_fit(TrainingSetup(TINY, batch=4, seq_len=32))
    assert advice.fits
    assert advice.changes == ()


def test_lora_with_4_bit_weights_shrinks_a_3b_model_to_fit_one_t4():
    # The guides' Qwen2.5-VL-3B LoRA run: 18,576,384 trainable of 3,773,199,360.
    shape = ModelShape(layers=36, hidden=2048, heads=16, vocab=151_936, intermediate=11008)
    share = 18_576_384 / 3_773_199_360
    full = TrainingSetup(shape, batch=1, seq_len=1024, params=3_773_199_360)
    qlora = TrainingSetup(
        shape,
        batch=1,
        seq_len=1024,
        params=3_773_199_360,
        trainable_share=share,
        quantize_4bit=True,
        gradient_checkpointing=True,
    )
    assert not plan_memory(full).fits()
    plan = plan_memory(qlora)
    assert plan.fits()
    # Frozen weights at 4.127 bits, adapters in fp32; their grads and Adam state 12 bytes more.
    frozen, adapters = 3_773_199_360 - 18_576_384, 18_576_384
    assert plan.weights == pytest.approx(frozen * 4.127 / 8 + adapters * 4)
    assert plan.gradients + plan.optimizer == pytest.approx(adapters * 12)


def test_job_config_check_reads_the_lm_trainers_keys():
    config = {
        "hidden_size": 4096,
        "num_hidden_layers": 32,
        "num_attention_heads": 32,
        "vocab_size": 32_000,
        "intermediate_size": 11008,
        "batch_size": 4,
        "block_size": 2048,
    }
    advice = check_t4_job(config, ranks=2)
    assert not advice.fits  # a 7B full fine-tune: no change short of LoRA fits a T4
    assert any("LoRA" in change for change in advice.changes)


def test_planner_imports_without_torch():
    code = "import sys, trainers.memory_plan; assert 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, check=True)


SEVEN_B = {
    "hidden_size": 4096,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "vocab_size": 32_000,
    "intermediate_size": 11008,
    "batch_size": 4,
    "block_size": 2048,
}


def test_a_kaggle_gpu_job_that_cannot_fit_a_t4_is_refused_with_the_fix():
    spec = kaggle_spec(trainer="trainers.accelerate_lm:AccelerateCausalLM", config=SEVEN_B)
    with pytest.raises(ValidationError) as refused:
        JobSpec.model_validate(spec)
    [error] = refused.value.errors()
    assert error["loc"] == ("config",)
    assert "will not fit" in error["msg"]
    assert "LoRA" in error["msg"]
    # The same job with the suggested LoRA + 4-bit set-up and checkpointing is accepted.
    qlora = {
        **SEVEN_B,
        "batch_size": 1,
        "gradient_checkpointing": True,
        "lora": {"r": 16, "load_in_4bit": True},
    }
    fitted = kaggle_spec(trainer="trainers.accelerate_lm:AccelerateCausalLM", config=qlora)
    JobSpec.model_validate(fitted)
