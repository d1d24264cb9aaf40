import pytest
import torch

from worker.sampler import ResumableSampler

N = 10


def sampler(**kwargs) -> ResumableSampler:
    return ResumableSampler(N, seed=kwargs.pop("seed", 1), **kwargs)


def test_each_epoch_is_a_new_permutation():
    s = sampler()
    epochs = [s.take(N) for _ in range(3)]
    assert all(sorted(epoch) == list(range(N)) for epoch in epochs)
    assert len({tuple(epoch) for epoch in epochs}) == 3  # no two epochs share an order
    assert s.state_dict()["epoch"] == 3


@pytest.mark.parametrize("cuts", [[3], [10], [7, 13, 20], [1, 2, 3, 29]])
def test_resume_continues_exactly_across_epoch_boundaries(cuts):
    uninterrupted = sampler().take(35)
    resumed: list[int] = []
    state = None
    for start, end in zip([0, *cuts], [*cuts, 35], strict=True):
        fresh = sampler()
        if state is not None:
            fresh.load_state_dict(state)
        resumed += fresh.take(end - start)
        state = fresh.state_dict()
    assert resumed == uninterrupted


def test_order_does_not_touch_the_global_rng():
    before = torch.get_rng_state()
    sampler().take(25)
    assert torch.equal(torch.get_rng_state(), before)


def test_set_epoch_keeps_position_for_the_current_epoch():
    s = sampler()
    s.take(4)
    s.set_epoch(0)  # what a training loop does on resume: must not restart the epoch
    assert s.state_dict()["position"] == 4
    s.set_epoch(2)
    assert (s.epoch, s.position) == (2, 0)


def test_iter_yields_the_rest_of_the_epoch():
    s = sampler()
    head = s.take(4)
    rest = list(s)
    assert sorted(head + rest) == list(range(N))
    assert (s.epoch, s.position) == (1, 0)


def test_ranks_split_each_epoch():
    ranks = [sampler(rank=r, world_size=3) for r in range(3)]
    shards = [r.take(len(r)) for r in ranks]
    assert all(len(shard) == 4 for shard in shards)  # 10 padded to 12
    assert set().union(*shards) == set(range(N))


def test_seed_changes_the_order():
    assert sampler(seed=1).take(N) != sampler(seed=2).take(N)


def test_loading_state_from_a_different_dataset_is_refused():
    state = sampler().state_dict()
    with pytest.raises(ValueError, match="num_samples"):
        ResumableSampler(N + 1, seed=1).load_state_dict(state)
