"""Rank identity from torchrun's environment, and the stop codes' precedence."""

from worker.distributed import (
    GO_ON,
    STOP_COMPLETED,
    STOP_DEADLINE,
    STOP_FLAG,
    RankInfo,
    SingleProcess,
    join_rank_group,
    launched_by_torchrun,
)


def test_rank_comes_from_torchrun_environment():
    info = RankInfo.from_environ({"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1"})
    assert (info.rank, info.world_size, info.local_rank, info.is_main) == (1, 2, 1, False)
    assert RankInfo.from_environ({}) == RankInfo(rank=0, world_size=1, local_rank=0)
    assert launched_by_torchrun({"TORCHELASTIC_RUN_ID": "x", "WORLD_SIZE": "2"})
    assert not launched_by_torchrun({})


def test_one_process_is_its_own_group():
    group = join_rank_group(RankInfo(), timeout_seconds=1)
    assert isinstance(group, SingleProcess)
    assert group.agree_stop(STOP_DEADLINE) == STOP_DEADLINE
    assert group.agree_stop(GO_ON) == GO_ON


def test_max_picks_the_stop_that_explains_the_segment_best():
    # Completion beats a stop request, which beats the deadline: MAX over ranks keeps that.
    assert GO_ON < STOP_DEADLINE < STOP_FLAG < STOP_COMPLETED
