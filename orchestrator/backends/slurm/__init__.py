"""The Slurm backend: each segment is one `sbatch` of a script that runs the worker."""
