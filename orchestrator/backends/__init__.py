"""Backends launch segments as sessions: local processes now, Kaggle kernels next."""
