# Sourced by the setup_*_env.sh scripts: a venv of its own with the pinned CPU torch, made idempotently.
# The caller sets ENV_DIR, PYTHON, TORCH_VERSION and say(); CHECK is a function printing the installed
# version of the package the env is for, failing when it does not import.

# ensure_venv CHECK WANT NAME: exit 0 when ENV_DIR already has NAME at WANT, else create or reuse ENV_DIR
# and set PIP, INSTALL and Q (pip's quiet flag; VERBOSE=1 shows pip's per-package lines). INSTALL skips
# compiling every module to bytecode (two thirds of installing torch's CPU time, and CI builds three of
# these environments beside the default suite) only where Python writes the bytecode of what a run imports
# at its first import: under PYTHONDONTWRITEBYTECODE it never would, and every server start would compile
# SGLang, vLLM and torch from source again (SGLang's HTTP server imported in 44 s instead of 17 here).
ensure_venv() {
    local check="$1" want="$2" name="$3" have
    if [[ -x "$ENV_DIR/bin/python" ]]; then
        if have="$("$check")" && [[ "$(tail -n1 <<<"$have")" == "$want" ]]; then
            say "$ENV_DIR already has a working $name $want: nothing to do"
            exit 0
        fi
        say "$ENV_DIR exists but lacks a working $name $want: (re)installing into it"
    else
        say "creating venv $ENV_DIR with $($PYTHON --version 2>&1) ($(command -v "$PYTHON"))"
        "$PYTHON" -m venv "$ENV_DIR"
    fi
    PIP=("$ENV_DIR/bin/python" -m pip --disable-pip-version-check)
    INSTALL=("${PIP[@]}" install)
    if [[ -z "${PYTHONDONTWRITEBYTECODE:-}" ]]; then
        INSTALL+=(--no-compile)
    fi
    Q=(--quiet)
    [[ "${VERBOSE:-0}" == 1 ]] && Q=()
    say "upgrading pip"
    "${PIP[@]}" install --quiet --upgrade pip
}

install_cpu_torch() {
    say "installing torch==$TORCH_VERSION (CPU build)"
    "${INSTALL[@]}" "${Q[@]}" "torch==$TORCH_VERSION"
    if ! "$ENV_DIR/bin/python" -W ignore -c "import torch, sys; sys.exit(0 if '+cpu' in torch.__version__ else 1)"; then
        say "WARNING: installed torch is $("$ENV_DIR/bin/python" -W ignore -c 'import torch; print(torch.__version__)'), not a +cpu build;"
        say "         point pip at a find-links dir or index that has torch==$TORCH_VERSION+cpu"
    fi
}

# verify_installed CHECK WANT NAME IMPORT: exit 1, saying why, unless NAME imports at WANT.
verify_installed() {
    local check="$1" want="$2" name="$3" statement="$4" have
    say "verifying: $statement"
    if ! have="$("$check")"; then
        say "ERROR: '$statement' fails in $ENV_DIR:"
        "$ENV_DIR/bin/python" -c "$statement" || true
        exit 1
    fi
    have="$(tail -n1 <<<"$have")"
    if [[ "$have" != "$want" ]]; then
        say "ERROR: $name $have installed, expected $want"
        exit 1
    fi
}
