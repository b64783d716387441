#!/usr/bin/env bash
# The whole airlock workflow on the small model in testdata/tiny-model:
# keygen -> pack -> verify -> unpack -> check, in a temporary directory (or $1).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh >/dev/null
cargo build --locked --release -q
airlock="$PWD/target/release/airlock"
model="$PWD/testdata/tiny-model"
work="${1:-$(mktemp -d)}"
mkdir -p "$work"
cd "$work"
rm -rf demo-key.* bundle installed
run() { echo; echo "\$ airlock $*"; "$airlock" "$@"; }

echo "== staging host: make a signing key and pack the model"
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
