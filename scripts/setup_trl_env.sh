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

if [[ -x "$ENV_DIR/bin/python" ]]; then
    if have="$(check_trl)" && [[ "$(tail -n1 <<<"$have")" == "$TRL_VERSION" ]]; then
        say "$ENV_DIR already has trl $TRL_VERSION: nothing to do"
        exit 0
    fi
    say "$ENV_DIR exists but lacks a working trl $TRL_VERSION: (re)installing into it"
else
    say "creating venv $ENV_DIR with $($PYTHON --version 2>&1) ($(command -v "$PYTHON"))"
    "$PYTHON" -m venv "$ENV_DIR"
fi

PIP=("$ENV_DIR/bin/python" -m pip --disable-pip-version-check)
Q=(--quiet)
[[ "${VERBOSE:-0}" == 1 ]] && Q=()

say "upgrading pip"
"${PIP[@]}" install --quiet --upgrade pip

say "installing torch==$TORCH_VERSION (CPU build)"
"${PIP[@]}" install "${Q[@]}" "torch==$TORCH_VERSION"
if ! "$ENV_DIR/bin/python" -W ignore -c "import torch, sys; sys.exit(0 if '+cpu' in torch.__version__ else 1)"; then
    say "WARNING: installed torch is $("$ENV_DIR/bin/python" -W ignore -c 'import torch; print(torch.__version__)'), not a +cpu build"
fi

say "installing trl==$TRL_VERSION, transformers==$TRANSFORMERS_VERSION"
"${PIP[@]}" install "${Q[@]}" "trl==$TRL_VERSION" "transformers==$TRANSFORMERS_VERSION" "torch==$TORCH_VERSION"

say "verifying: from trl import GRPOTrainer"
if ! have="$(check_trl)"; then
    say "ERROR: 'from trl import GRPOTrainer' fails in $ENV_DIR:"
    "$ENV_DIR/bin/python" -c "from trl import GRPOTrainer" || true
    exit 1
fi
have="$(tail -n1 <<<"$have")"
if [[ "$have" != "$TRL_VERSION" ]]; then
    say "ERROR: trl $have installed, expected $TRL_VERSION"
    exit 1
fi
versions="$("$ENV_DIR/bin/python" -W ignore -c 'import torch, transformers; print(f"torch {torch.__version__}, transformers {transformers.__version__}")')"
say "done: trl $have, $versions, $(du -sh "$ENV_DIR" | cut -f1), $(( $(date +%s) - start ))s"
