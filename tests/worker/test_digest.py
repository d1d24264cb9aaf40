import re

import torch

from worker.digest import model_digest


def test_digest_ignores_insertion_order_and_copies():
    a = {"w": torch.arange(6.0).reshape(2, 3), "b": torch.ones(3)}
    b = {"b": torch.ones(3), "w": torch.arange(6.0).reshape(2, 3).clone()}
    assert model_digest(a) == model_digest(b)


def test_one_bit_changes_the_digest():
    weights = torch.zeros(4)
    flipped = weights.clone()
    flipped.view(torch.int32)[2] ^= 1
    assert model_digest({"w": weights}) != model_digest({"w": flipped})


def test_dtype_shape_and_key_are_part_of_the_digest():
    base = model_digest({"w": torch.zeros(4, dtype=torch.float32)})
    assert base != model_digest({"w": torch.zeros(4, dtype=torch.int32)})  # same bytes
    assert base != model_digest({"w": torch.zeros(2, 2, dtype=torch.float32)})
    assert base != model_digest({"v": torch.zeros(4, dtype=torch.float32)})


def test_non_contiguous_bfloat16_and_scalar_tensors_hash():
    transposed = torch.arange(6.0).reshape(2, 3).t()
    assert model_digest({"t": transposed}) == model_digest({"t": transposed.contiguous()})
    assert model_digest({"t": transposed}) != model_digest({"t": transposed.contiguous().t()})
    half = torch.ones(3, dtype=torch.bfloat16)
    flipped = half.clone()
    flipped.view(torch.int16)[1] ^= 1  # one bit of one bfloat16 value
    assert model_digest({"b": half}) != model_digest({"b": flipped})
    assert model_digest({"s": torch.tensor(1)}) != model_digest({"s": torch.tensor([1])})
    assert re.fullmatch("[0-9a-f]{64}", model_digest({"b": half, "s": torch.tensor(1)}))


def test_the_digest_of_a_known_model_never_changes():
    """Digests are compared across machines, runs and Baton versions: format v1 is frozen."""
    model = {"w": torch.arange(4.0).reshape(2, 2), "b": torch.ones(2, dtype=torch.bfloat16)}
    assert model_digest(model) == "135eec562cd317403017dfcc85fe149de51ea34e5a5bda09925796d390b26bae"
