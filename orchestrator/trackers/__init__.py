"""The trackers a job's metrics go to: TensorBoard, Weights & Biases, MLflow.

The orchestrator writes them, from the metrics of committed segments only, so each tracker holds
one run per job with one point per step: a step a session trained past its last commit (and the
next session trained again) is never written twice, and nothing runs inside the session for it.
"""
