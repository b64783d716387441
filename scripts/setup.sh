#!/usr/bin/env bash
# Installs what airlock's tests need on a fresh Debian machine: the real minisign, zstd and GNU
# tar from Debian, util-linux's `script` (the progress-bar tests run airlock on a
# pseudo-terminal), Debian's docker-registry (CNCF distribution), htpasswd, openssl and curl for
# the registry tests, skopeo for the OCI image layout tests, and a Python venv with the pinned
# packages of scripts/requirements-test.txt (safetensors, gguf, numpy, huggingface_hub, tuf,
# oras), and the real model loaders of scripts/requirements-loaders.txt (torch, transformers,
# tokenizers, peft, sentence-transformers, diffusers) for the offline-readiness tests.
# Idempotent; safe to run again.
set -euo pipefail
cd "$(dirname "$0")/.."

need=()
for tool in minisign zstd tar sha256sum script python3 man unshare docker-registry htpasswd openssl curl skopeo; do
  command -v "$tool" >/dev/null 2>&1 || need+=("$tool")
done
if ((${#need[@]})); then
  pkgs=()
  for t in "${need[@]}"; do
    case "$t" in
      sha256sum) pkgs+=(coreutils) ;;
      script) pkgs+=(bsdutils) ;;
      man) pkgs+=(man-db) ;;
      unshare) pkgs+=(util-linux) ;;
      htpasswd) pkgs+=(apache2-utils) ;;
      python3) pkgs+=(python3 python3-venv) ;;
      *) pkgs+=("$t") ;;
    esac
  done
  echo "setup: installing ${pkgs[*]} with apt-get" >&2
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${pkgs[@]}" >/dev/null
fi
python3 scripts/make-fixtures.py --venv-only
# The real loaders for tests/it/offline_ready.rs: several GB (torch's CUDA libraries), so once,
# and only when a pin changed.
VENV="${AIRLOCK_VENV:-.venv}"
MARK="$VENV/.airlock-loaders"
if ! cmp -s scripts/requirements-loaders.txt "$MARK"; then
  echo "setup: installing scripts/requirements-loaders.txt into $VENV (about 3 GB to download)" >&2
  "$VENV/bin/python" -m pip install --disable-pip-version-check --quiet -r scripts/requirements-loaders.txt
  cp scripts/requirements-loaders.txt "$MARK"
fi
