"""Every DeepSpeed config Baton generates is one DeepSpeed itself accepts (ZeRO-2 and ZeRO-3
chained on two CPU ranks: test_chained_digest.py)."""

import pytest

from trainers.deepspeed_lm import (
    DEFAULTS,
    OFFLOADS,
    bucket_sizes,
    deepspeed_config,
    validate_deepspeed_config,
)

# A model of ten million parameters, a hundred times the example configs' CPU runs.
PARAMETERS = 10_000_000


@pytest.mark.parametrize("stage", [2, 3])
@pytest.mark.parametrize("offload", OFFLOADS)
@pytest.mark.parametrize("precision", ["fp16", "bf16", "no"])
def test_every_generated_config_is_accepted_by_deepspeed(stage, offload, precision):
    cfg = {**DEFAULTS, "zero_stage": stage, "offload": offload}
    if offload == "optimizer+params" and stage != 3:
        with pytest.raises(ValueError, match="zero_stage 3"):
            deepspeed_config(cfg, precision, total_steps=100, parameters=PARAMETERS)
        return
    parsed = validate_deepspeed_config(
        deepspeed_config(cfg, precision, total_steps=100, parameters=PARAMETERS)
    )
    assert parsed.zero_optimization_stage == stage
    assert parsed.float16_config.enabled is (precision == "fp16")
    assert parsed.bfloat16_config.enabled is (precision == "bf16")
    assert (parsed.zero_config.offload_optimizer is None) is (offload == "none")
    assert (parsed.zero_config.offload_param is None) is (offload != "optimizer+params")
    assert parsed.gradient_accumulation_steps == DEFAULTS["grad_accum"]
    assert parsed.zero_config.reduce_bucket_size == PARAMETERS
    assert parsed.zero_config.allgather_bucket_size == PARAMETERS


def test_zero_buckets_are_never_larger_than_the_model_nor_than_deepspeeds_default():
    # ZeRO-2 allocates and clears its gradient bucket at this size every step: a bucket larger
    # than the model is memory and time spent on nothing; one the model's size holds every
    # gradient at once, as DeepSpeed's default does for any model under it.
    assert bucket_sizes(PARAMETERS) == {
        "reduce_bucket_size": PARAMETERS,
        "allgather_bucket_size": PARAMETERS,
    }
    assert bucket_sizes(7_000_000_000) == {
        "reduce_bucket_size": 500_000_000,
        "allgather_bucket_size": 500_000_000,
    }


def test_deepspeed_rejects_what_the_generator_must_never_emit():
    # The check is real: DeepSpeed refuses a config with contradictory precision.
    broken = deepspeed_config({**DEFAULTS}, "fp16", total_steps=100, parameters=PARAMETERS)
    broken["bf16"] = {"enabled": True}
    with pytest.raises((ValueError, AssertionError)):
        validate_deepspeed_config(broken)
