from tests.support.slurm import slurm_cluster

__all__ = ["slurm_cluster"]
