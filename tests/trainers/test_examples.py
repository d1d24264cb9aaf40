"""Every example spec a user may copy is a valid job spec naming a trainer that imports."""

from pathlib import Path

import pytest
import yaml

from orchestrator.spec import JobSpec
from tests.support.segments import REPO_ROOT
from worker.runtime import import_trainer

EXAMPLES = sorted((REPO_ROOT / "trainers" / "examples").glob("*.yaml"))


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_example_is_a_valid_job_spec(path: Path):
    spec = JobSpec.model_validate(yaml.safe_load(path.read_text()))
    import_trainer(spec.trainer)


def test_there_is_an_example_for_each_trainer():
    trainers = {yaml.safe_load(p.read_text())["trainer"] for p in EXAMPLES}
    assert {
        "trainers.accelerate_lm:AccelerateCausalLM",
        "trainers.hf_lm:HFCausalLM",
        "trainers.lora_lm:LoraCausalLM",
        "trainers.deepspeed_lm:DeepSpeedCausalLM",
    } <= trainers
