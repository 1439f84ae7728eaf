#!/usr/bin/env bash
# Docker on a machine that reaches Debian's packages and PyPI but no container registry (docs/container.md).
#
#   docker/local.sh          make ready: packages, engine, base image, the CPU torch wheel; prints the build command
#   docker/local.sh --stop   stop the dockerd this script started (its data root, base image included, stays)
#
# As root:
# 1. Debian's docker.io and mmdebstrap, installed with apt where missing. Debian's `docker` client is used
#    (/usr/bin/docker): it builds with BuildKit (DOCKER_BUILDKIT=1) without buildx, which another client may lack.
# 2. An engine: when none answers, Debian's dockerd is started with its own data root (GRPO_DOCKER_ROOT,
#    default /var/lib/grpo-docker), its log in DATA_ROOT.log; waited for up to 60 s.
# 3. The base image (GRPO_BASE_IMAGE, default grpo-base:bookworm), when the engine lacks it: Debian's own
#    packages (python3, python3-venv, ca-certificates; minbase) made into a root file system by mmdebstrap
#    and imported, instead of a registry's debian:bookworm-slim (about 2 minutes the first time; kept).
# 4. torch's CPU wheel in docker/wheels/, found through this machine's pip configuration (its find-links;
#    nothing is downloaded for it): the Dockerfile installs it from there instead of PyTorch's CPU index,
#    which this machine does not reach. Where pip finds none, the build uses the index (TORCH_INDEX).
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DATA_ROOT="${GRPO_DOCKER_ROOT:-/var/lib/grpo-docker}"
BASE_IMAGE="${GRPO_BASE_IMAGE:-grpo-base:bookworm}"
SUITE="${GRPO_DEBIAN_SUITE:-bookworm}"  # its python3 (3.11) is the one the staged wheel is for
MIRROR="${GRPO_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
DOCKER=/usr/bin/docker
PIDFILE="$DATA_ROOT.pid"
TORCH_VERSION=2.13.0

say() { printf '[docker/local.sh] %s\n' "$*"; }
die() { printf 'docker/local.sh: %s\n' "$*" >&2; exit 1; }

[[ "$(id -u)" == 0 ]] || die "needs root (it installs packages and starts dockerd); run it with sudo"

if [[ "${1:-}" == "--stop" ]]; then
    if [[ -s "$PIDFILE" ]] && kill -0 "$(cat "$PIDFILE")" 2>/dev/null; then
        pid="$(cat "$PIDFILE")"
        kill -TERM "$pid"
        # dockerd removes its pidfile when it has stopped its containers and containerd
        for _ in $(seq 300); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        kill -0 "$pid" 2>/dev/null && die "dockerd $pid still runs 30 s after SIGTERM"
        say "stopped dockerd $pid (data root $DATA_ROOT kept)"
    else
        say "no dockerd of this script's runs: nothing to stop"
    fi
    exit 0
fi
[[ $# == 0 ]] || die "unknown argument $1 (docker/local.sh [--stop])"

if [[ ! -x /usr/sbin/dockerd || ! -x "$DOCKER" ]] || ! command -v mmdebstrap >/dev/null; then
    say "installing docker.io and mmdebstrap (apt)"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq docker.io mmdebstrap >/dev/null
fi

if "$DOCKER" info >/dev/null 2>&1; then
    say "an engine answers: using it"
else
    say "starting dockerd (data root $DATA_ROOT)"
    mkdir -p "$DATA_ROOT"
    setsid /usr/sbin/dockerd --data-root "$DATA_ROOT" --pidfile "$PIDFILE" >"$DATA_ROOT.log" 2>&1 </dev/null &
    for _ in $(seq 600); do
        "$DOCKER" info >/dev/null 2>&1 && break
        kill -0 $! 2>/dev/null || { tail -n 20 "$DATA_ROOT.log" >&2; die "dockerd exited at its start (log above, $DATA_ROOT.log)"; }
        sleep 0.1
    done
    "$DOCKER" info >/dev/null 2>&1 || die "dockerd does not answer 60 s after its start ($DATA_ROOT.log)"
fi

if "$DOCKER" image inspect "$BASE_IMAGE" >/dev/null 2>&1; then
    say "base image $BASE_IMAGE: already there"
else
    say "building base image $BASE_IMAGE from Debian's packages ($SUITE, $MIRROR)"
    start=$(date +%s)
    mmdebstrap --quiet --variant=minbase --include=python3,python3-venv,ca-certificates "$SUITE" - "$MIRROR" </dev/null \
        | "$DOCKER" import --change 'CMD ["/bin/bash"]' - "$BASE_IMAGE" >/dev/null
    say "base image $BASE_IMAGE made in $(( $(date +%s) - start )) s"
fi

wheels="$REPO_ROOT/docker/wheels"
if compgen -G "$wheels/torch-$TORCH_VERSION+cpu-cp311-*.whl" >/dev/null; then
    say "torch CPU wheel: already in docker/wheels"
elif python3 -m pip download --quiet --no-deps --no-index --only-binary=:all: --python-version 3.11 \
        --platform "manylinux_2_28_$(uname -m)" --dest "$wheels" "torch==$TORCH_VERSION+cpu" 2>/dev/null; then
    say "torch CPU wheel: from this machine's pip configuration into docker/wheels"
else
    say "torch CPU wheel: none in this machine's pip configuration; the build takes it from TORCH_INDEX"
fi

cacert=""
[[ -s /etc/ssl/certs/ca-certificates.crt ]] && cacert=" --secret id=cacert,src=/etc/ssl/certs/ca-certificates.crt"
say "ready. Build with:"
echo "DOCKER_BUILDKIT=1 $DOCKER build --build-arg BASE=$BASE_IMAGE$cacert -t grpo:cpu $REPO_ROOT"
