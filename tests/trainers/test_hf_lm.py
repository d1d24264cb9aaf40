"""The Hugging Face Trainer's sampler resumes at a step (the trainer's chain runs in
test_chained_digest.py)."""

from worker.hf import StepPositionedSampler


def test_sampler_resumes_at_the_step_without_replaying(tmp_path):
    def order(step: int) -> list[int]:
        sampler = StepPositionedSampler(
            10, seed=3, samples_per_step=4, total_steps=6, current_step=lambda: step
        )
        return list(sampler)

    whole = order(0)
    assert len(whole) == 24  # crosses two epoch boundaries of 10 samples
    assert sorted(whole[:10]) == list(range(10))
    for step in (1, 2, 3, 5):
        assert order(step) == whole[step * 4 :]
