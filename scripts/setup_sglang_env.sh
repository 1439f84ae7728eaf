#!/usr/bin/env bash
# Build the separate Python environment that runs a real SGLang (CPU) rollout server.
#
#   scripts/setup_sglang_env.sh [ENV_DIR]      (default: <repo>/.venv-sglang, gitignored)
#
# SGLang pins its own torch/transformers, so it lives in its own venv and the trainer talks to it over
# HTTP; nothing from this env is imported by the `grpo` package. Start a server with
#   SGLANG_USE_CPU_ENGINE=1 ENV_DIR/bin/python -m sglang.launch_server --model-path DIR --device cpu \
#       --attention-backend torch_native --dtype float32 --max-total-tokens 4096 --host 127.0.0.1 --port PORT
# (torch_native: the CPU default, intel_amx, needs kernels that are not here; --max-total-tokens: without
# it the KV cache takes most of the free memory, 12 GB and 40 s on this machine.)
#
# sglang 0.5.23's metadata pins CUDA packages (flashinfer, sglang-kernel, torch==2.14.1, nvidia-*), so:
# python3 -m venv -> torch==2.13.0 (the +cpu build) -> the dependencies SGLang needs to import and serve
# a text model on CPU, installed under a constraint that holds torch at the CPU build -> sglang, triton,
# xgrammar, compressed-tensors, apache-tvm-ffi and torchvision with --no-deps -> torchvision patched to
# import beside the CPU torch (scripts/sglang_cpu_shim/patch_torchvision.py says why) -> grpo's pure-torch
# `sgl_kernel` (scripts/sglang_cpu_shim/sgl_kernel; no CPU build of SGLang's kernel package is on PyPI)
# copied into site-packages -> check the imports -> start a real server on grpo's tiny test model, check
# one /generate against transformers, stop it (scripts/check_sglang_server.py).
# About 90 s and 2.3 GB on this 2-core machine, plus 25-40 s for the server check (130 s in all, the
# same with an empty pip cache); an idempotent re-run ~10 s.
#
# Idempotent: when ENV_DIR already imports sglang at the pinned version, with the shim as in this repo and
# a patched torchvision, and passed the server check, it exits after that import check (~10 s).
#
# Overrides (environment): PYTHON (interpreter used to create the venv, default python3),
# SGLANG_VERSION (default 0.5.23), TORCH_VERSION (default 2.13.0), SKIP_SERVER_CHECK=1 (install and
# check imports only), SGLANG_CHECK_MODEL (a local model directory for the server check instead of
# grpo's tiny model), VERBOSE=1 (pip's per-package lines).
#
# Like setup_vllm_env.sh, torch==2.13.0+cpu must be findable by pip (this machine's pip config has the
# find-links directory /opt/wheels).
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
ENV_DIR="${1:-$REPO_ROOT/.venv-sglang}"
PYTHON="${PYTHON:-python3}"
SGLANG_VERSION="${SGLANG_VERSION:-0.5.23}"
TORCH_VERSION="${TORCH_VERSION:-2.13.0}"
SHIM_DIR="$REPO_ROOT/scripts/sglang_cpu_shim"
# Written once the server check has passed, so that a re-run after a failed check does not skip it.
VERIFIED="$ENV_DIR/.sglang-server-checked"

# What sglang 0.5.23 imports when it starts a server for a text model on CPU (found by importing the
# server's modules and starting it, one missing module at a time), pinned where sglang pins them.
# sglang imports jsonschema and dill without declaring them; loguru is compressed-tensors' (--no-deps below).
DEPS=(
    "transformers==5.19.0" "tokenizers==0.23.2" "sentencepiece==0.2.1" "openai==2.8.0" "soundfile==0.13.1"
    fastapi "uvicorn>=0.51" uvloop python-multipart orjson msgspec "pyzmq>=25.1.2" setproctitle psutil
    aiohttp pybase64 pillow IPython dill jsonschema loguru gguf partial_json_parser einops
)
# Installed without their dependencies: sglang's own would pull CUDA torch and kernels. triton is the
# release torch 2.13.0 pins (SGLang imports it on CPU but compiles nothing); torchvision 0.28.0 is the
# release made with torch 2.13.0; xgrammar, compressed-tensors and apache-tvm-ffi at sglang's pins.
NO_DEPS=(
    "triton==3.7.1" "torchvision==0.28.0" "xgrammar==0.2.7" "compressed-tensors==0.18.0"
    "apache-tvm-ffi==0.1.11" "sglang==$SGLANG_VERSION"
)

# SGLang's CPU code paths (and its imports of sgl_kernel) are on only with this set, here as for a server.
export SGLANG_USE_CPU_ENGINE=1

say() { printf '[setup_sglang_env] %s\n' "$*"; }

site_packages() {
    "$ENV_DIR/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])'
}

check_imports() {
    # Prints the installed sglang version; fails when sglang, the shim (as in this repo) or
    # torchvision.transforms does not import.
    diff -rq --exclude=__pycache__ "$SHIM_DIR/sgl_kernel" "$(site_packages)/sgl_kernel" >/dev/null || return 1
    "$ENV_DIR/bin/python" - <<'EOF' 2>/dev/null
import importlib.metadata as md, logging, warnings
logging.disable(logging.CRITICAL)
warnings.simplefilter("ignore")
import sglang, sgl_kernel, torchvision.transforms  # noqa: F401
from sglang.srt.entrypoints import http_server  # noqa: F401  (imports the scheduler, model runner, sgl_kernel users)
print(md.version("sglang"))
EOF
}

check_ready() {
    # check_imports, and the server check has passed (unless it is skipped).
    if [[ "${SKIP_SERVER_CHECK:-0}" != 1 && ! -f "$VERIFIED" ]]; then
        return 1
    fi
    check_imports
}

start=$(date +%s)

source "$REPO_ROOT/scripts/cpu_venv.sh"
ensure_venv check_ready "$SGLANG_VERSION" sglang
rm -f "$VERIFIED"
install_cpu_torch

constraints="$(mktemp)"
trap 'rm -f "$constraints"' EXIT
echo "torch==$TORCH_VERSION" >"$constraints"

say "installing sglang's CPU dependencies (${#DEPS[@]} packages and theirs, torch held at $TORCH_VERSION)"
"${INSTALL[@]}" "${Q[@]}" --constraint "$constraints" "${DEPS[@]}"
say "installing ${NO_DEPS[*]} without their dependencies"
"${INSTALL[@]}" "${Q[@]}" --no-deps "${NO_DEPS[@]}"

say "patching torchvision to import beside the CPU torch"
"$ENV_DIR/bin/python" "$SHIM_DIR/patch_torchvision.py"

say "installing grpo's CPU shim of sgl_kernel"
sgl_kernel_dir="$(site_packages)/sgl_kernel"
rm -rf "$sgl_kernel_dir"
mkdir "$sgl_kernel_dir"
cp "$SHIM_DIR"/sgl_kernel/*.py "$sgl_kernel_dir/"

verify_installed check_imports "$SGLANG_VERSION" sglang \
    "import sglang, sgl_kernel, torchvision.transforms; from sglang.srt.entrypoints import http_server"

if [[ "${SKIP_SERVER_CHECK:-0}" == 1 ]]; then
    say "SKIP_SERVER_CHECK=1: not starting a server"
else
    say "starting a real server to check it (SKIP_SERVER_CHECK=1 skips this)"
    "$ENV_DIR/bin/python" "$REPO_ROOT/scripts/check_sglang_server.py" \
        ${SGLANG_CHECK_MODEL:+--model "$SGLANG_CHECK_MODEL"}
    echo "$SGLANG_VERSION" >"$VERIFIED"
fi

say "done: sglang $SGLANG_VERSION, torch $("$ENV_DIR/bin/python" -W ignore -c 'import torch; print(torch.__version__)'), $(du -sh "$ENV_DIR" | cut -f1), $(( $(date +%s) - start ))s"
