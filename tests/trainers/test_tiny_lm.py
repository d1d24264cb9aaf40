"""TinyCharLM's learning-rate schedule and the demo spec (its chain runs in
test_chained_digest.py)."""

import math

import pytest
import yaml

from tests.support.segments import REPO_ROOT
from trainers.tiny_lm import warmup_cosine
from worker.runtime import import_trainer


def test_schedule_warms_up_then_decays_to_the_floor():
    factor = warmup_cosine(warmup=10, total=110, min_ratio=0.1)
    assert factor(0) == pytest.approx(0.1)
    assert factor(9) == pytest.approx(1.0)
    assert factor(60) == pytest.approx(0.55)
    assert factor(110) == pytest.approx(0.1)
    assert all(factor(s) >= factor(s + 1) for s in range(10, 120))
    assert not math.isnan(factor(10_000))


def test_demo_spec_names_an_importable_trainer():
    demo = yaml.safe_load((REPO_ROOT / "trainers" / "examples" / "demo.yaml").read_text())
    assert demo["name"] == "demo-tiny-lm"
    assert demo["backend"] == "local"
    import_trainer(demo["trainer"])
    assert demo["total_steps"] > 0
    assert demo["session"]["limit_seconds"] > 0
