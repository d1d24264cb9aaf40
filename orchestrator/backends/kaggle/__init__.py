"""The Kaggle backend: segments run as kernels, checkpoints live in a dataset's versions."""
