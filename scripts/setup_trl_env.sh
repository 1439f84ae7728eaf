#!/usr/bin/env bash
# Build the separate Python environment that runs TRL's GRPOTrainer for bench/trl.py.
#
#   scripts/setup_trl_env.sh [ENV_DIR]      (default: <repo>/.venv-trl, gitignored)
#
# TRL is only a yardstick: nothing from this env is imported by the `grpo` package. bench/trl.py runs
# bench/trl_runner.py with ENV_DIR/bin/python, offline (HF_HUB_OFFLINE=1), on a model directory that
# grpo's own loader writes, so both sides train the same weights with the same tokenizer.
#
# Steps: python3 -m venv -> torch==2.13.0 (the +cpu build) -> trl==1.16.0 with the transformers
# release grpo's own environment runs (same model code on both sides) -> check the pinned versions.
#
# Idempotent: when ENV_DIR already imports trl at the pinned version it exits at once.
#
# Overrides (environment): PYTHON (default python3), TRL_VERSION (default 1.16.0), TORCH_VERSION
# (default 2.13.0), TRANSFORMERS_VERSION (default 5.23.0).
#
# torch==2.13.0+cpu is a local version that PyPI does not host: pip must find it in a find-links
# directory (this machine's pip config has /opt/wheels) or an extra index that serves CPU builds.
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
ENV_DIR="${1:-$REPO_ROOT/.venv-trl}"
PYTHON="${PYTHON:-python3}"
TRL_VERSION="${TRL_VERSION:-1.16.0}"
TORCH_VERSION="${TORCH_VERSION:-2.13.0}"
TRANSFORMERS_VERSION="${TRANSFORMERS_VERSION:-5.23.0}"

say() { printf '[setup_trl_env] %s\n' "$*"; }

check_trl() {
    # Prints the installed trl version; fails when GRPOTrainer does not import.
    "$ENV_DIR/bin/python" - <<'PY' 2>/dev/null
import importlib.metadata as md
from trl import GRPOConfig, GRPOTrainer  # noqa: F401
print(md.version("trl"))
PY
}

start=$(date +%s)

source "$REPO_ROOT/scripts/cpu_venv.sh"
ensure_venv check_trl "$TRL_VERSION" trl
install_cpu_torch

say "installing trl==$TRL_VERSION, transformers==$TRANSFORMERS_VERSION"
"${INSTALL[@]}" "${Q[@]}" "trl==$TRL_VERSION" "transformers==$TRANSFORMERS_VERSION" "torch==$TORCH_VERSION"

verify_installed check_trl "$TRL_VERSION" trl "from trl import GRPOTrainer"
versions="$("$ENV_DIR/bin/python" -W ignore -c 'import torch, transformers; print(f"torch {torch.__version__}, transformers {transformers.__version__}")')"
say "done: trl $TRL_VERSION, $versions, $(du -sh "$ENV_DIR" | cut -f1), $(( $(date +%s) - start ))s"
