# The image the k8s/ manifests name (neurcam-dist): Ray head and workers, the job entrypoints
# (jobs/) and the neurcam CLI, installed from constraints.txt (the tested versions).
#   docker build -t neurcam-dist:0.1.0 .                                   # CPU torch
#   docker build -t neurcam-dist:0.1.0-cuda --build-arg TORCH_INDEX=https://download.pytorch.org/whl/cu128 .
FROM python:3.11-slim

ARG TORCH_VERSION=2.13.0
ARG TORCH_INDEX=https://download.pytorch.org/whl/cpu

ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 \
    HOME=/tmp MPLCONFIGDIR=/tmp/matplotlib

RUN groupadd --gid 10001 ray && useradd --uid 10001 --gid 10001 --no-create-home --shell /usr/sbin/nologin ray

WORKDIR /app
# torch first, from the chosen index (a bare torch requirement would pull the default CUDA build)
RUN pip install --index-url "${TORCH_INDEX}" "torch==${TORCH_VERSION}"
COPY constraints.txt pyproject.toml README.md ./
# The dependencies in a layer of their own, installed against an empty package: a code change
# rebuilds only the layers below, not the dependency install.
RUN mkdir neurcam_dist && touch neurcam_dist/__init__.py \
    && pip install -c constraints.txt ".[service,cluster]" \
    && pip uninstall -y neurcam-dist && rm -rf neurcam_dist build
COPY neurcam_dist ./neurcam_dist
RUN pip install --no-deps .
COPY jobs ./jobs
COPY configs ./configs

# non-root, and nothing under /app is writable: runs write to /data (a volume) and /tmp
USER 10001:10001
CMD ["neurcam", "--help"]
