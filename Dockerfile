# The image the k8s/ manifests name (neurcam-dist): Ray head and workers, the job entrypoints
# (jobs/) and the neurcam CLI, installed from constraints.txt (the tested versions).
#   docker build -t neurcam-dist:0.1.0 .                                   # CPU torch
#   docker build -t neurcam-dist:0.1.0-cuda --build-arg TORCH_INDEX=https://download.pytorch.org/whl/cu128 .
FROM python:3.11-slim

ARG TORCH_VERSION=2.13.0
ARG TORCH_INDEX=https://download.pytorch.org/whl/cpu

ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 \
    HOME=/tmp MPLCONFIGDIR=/tmp/matplotlib

RUN groupadd --gid 1000 ray && useradd --uid 1000 --gid 1000 --no-create-home --shell /usr/sbin/nologin ray

WORKDIR /app
# torch first, from the chosen index (a bare torch requirement would pull the default CUDA build)
RUN pip install --index-url "${TORCH_INDEX}" "torch==${TORCH_VERSION}"
COPY constraints.txt pyproject.toml README.md ./
COPY neurcam_dist ./neurcam_dist
RUN pip install -c constraints.txt ".[service,cluster]"
COPY jobs ./jobs
COPY configs ./configs

# non-root, and nothing under /app is writable: runs write to /data (a volume) and /tmp
USER 1000:1000
CMD ["neurcam", "--help"]
