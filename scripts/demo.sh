#!/usr/bin/env bash
# The whole airlock workflow on the small model in testdata/tiny-model:
# keygen -> pack -> verify -> unpack -> check, in a temporary directory (or $1).
# Installs only what the demo uses (minisign and zstd, with apt-get when they are missing) and
# builds airlock in release mode, showing the build. AIRLOCK=/path/to/airlock skips the build
# and runs that binary instead.
set -euo pipefail
cd "$(dirname "$0")/.."

need=()
for tool in minisign zstd; do
    command -v "$tool" >/dev/null 2>&1 || need+=("$tool")
done
if ((${#need[@]})); then
    echo "== installing ${need[*]} with apt-get (the demo checks the bundle with them too)"
    SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need[@]}" >/dev/null
fi

if [ -n "${AIRLOCK:-}" ]; then
    airlock="$AIRLOCK"
else
    scripts/check-rust.sh
    echo "== building airlock: cargo build --release (a few minutes the first time)"
    cargo build --locked --release
    airlock="$PWD/target/release/airlock"
fi
model="$PWD/testdata/tiny-model"
work="${1:-$(mktemp -d)}"
mkdir -p "$work"
cd "$work"
rm -rf demo-key.* bundle installed
run() { echo; echo "\$ airlock $*"; "$airlock" "$@"; }

echo; echo "== staging host: make a signing key and pack the model"
run keygen --out demo-key --unencrypted
run pack "$model" -o bundle --key demo-key.key --name tiny-model --version 1 --volume-size 100K
ls -l bundle

echo; echo "== removable media: verify the bundle in place (read-only)"
run verify bundle --trust demo-key.pub --deep

echo; echo "== air-gapped target: verify, unpack atomically, keep a receipt"
run unpack bundle --trust demo-key.pub --dest installed
run check installed --trust demo-key.pub

echo; echo "== the same with standard tools only"
echo "\$ minisign -Vm bundle/manifest.json -p demo-key.pub"
minisign -Vm bundle/manifest.json -p demo-key.pub
echo "\$ cat bundle/data.* | zstd -dc | tar -t"
cat bundle/data.* | zstd -dc | tar -t

echo; echo "demo OK: everything is in $work"
