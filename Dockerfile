# Two images from one file (docker-compose.yml builds both):
#   --target orchestrator  API, beat and Kaggle-only workers: no torch; the trackers extra (the
#                          engine writes TensorBoard, W&B and MLflow runs after each commit)
#   --target worker        workers that also run local sessions: adds the `train` extra (torch)
# Secrets never go in here: every setting, the database password and BATON_SECRET_KEYS included,
# comes from the environment at run time.
FROM python:3.11-slim AS orchestrator
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /app
COPY pyproject.toml README.md ./
COPY orchestrator orchestrator
COPY worker worker
COPY trainers trainers
COPY migrations migrations
RUN pip install ".[trackers]" \
    && useradd --create-home --uid 10001 baton \
    && mkdir -p /data \
    && chown baton /data
USER baton
ENV BATON_DATA_DIR=/data
EXPOSE 8000
CMD ["baton", "serve", "--host", "0.0.0.0", "--port", "8000"]

FROM orchestrator AS worker
USER root
# A CPU build by default, as in the Makefile; pass --build-arg TORCH=... for a CUDA one.
ARG TORCH=torch==2.13.0
RUN pip install "$TORCH" && pip install ".[train]"
USER baton
CMD ["baton", "worker"]
