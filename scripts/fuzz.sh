#!/usr/bin/env bash
# Runs every cargo-fuzz target for SECONDS each (default 60) and prints the executions reached.
# Needs cargo-fuzz (`cargo install cargo-fuzz --locked`). The stable toolchain is enough: the
# sanitizer flags cargo-fuzz passes are allowed with RUSTC_BOOTSTRAP=1.
# Seeds: the hostile bundles and fixtures in testdata/. A crash is saved under
# fuzz/artifacts/<target>/ and must become a regression test before it is fixed.
set -euo pipefail
cd "$(dirname "$0")/../fuzz"
secs="${1:-60}"
command -v cargo-fuzz >/dev/null || cargo install cargo-fuzz --locked
export RUSTC_BOOTSTRAP=1
mkdir -p corpus/manifest corpus/keys corpus/stream corpus/volumes
find ../testdata -name manifest.json -exec cp {} corpus/manifest/ \; 2>/dev/null || true
for f in ../testdata/hostile/*/manifest.json; do cp "$f" "corpus/manifest/$(basename "$(dirname "$f")").json"; done
for f in ../testdata/keys/*.pub ../testdata/hostile/*/manifest.json.minisig; do
  cp "$f" "corpus/keys/$(basename "$(dirname "$f")")-$(basename "$f")"
done
for f in ../testdata/hostile/*/data.000; do
  [ "$(stat -c %s "$f")" -le 1048576 ] && cp "$f" "corpus/stream/$(basename "$(dirname "$f")")"
done
# The volume reader's input: 4-byte little-endian manifest length, manifest, volumes.
for d in ../testdata/hostile/*/; do
  [ -f "$d/manifest.json" ] || continue
  total=$(cat "$d"/data.* 2>/dev/null | wc -c)
  [ "$total" -le 1048576 ] || continue
  python3 -c 'import struct,sys; sys.stdout.buffer.write(struct.pack("<I", int(sys.argv[1])))' \
    "$(stat -c %s "$d/manifest.json")" >"corpus/volumes/$(basename "$d")"
  cat "$d/manifest.json" "$d"/data.* >>"corpus/volumes/$(basename "$d")" 2>/dev/null
done
for t in manifest keys stream volumes; do
  echo "== $t: ${secs}s"
  cargo fuzz run "$t" "corpus/$t" -- -max_total_time="$secs" -rss_limit_mb=2048 -max_len=1048576 2>&1 \
    | grep -E "^#[0-9]+.*(DONE|pulse)|Done [0-9]+ runs|ERROR|SUMMARY" | tail -3
done
# What a registry sends (image manifests, ModelPack config.json, token and error bodies,
# challenges, Content-Range answers, digests): seeds from the unit tests' shapes, under a
# 512 MiB memory cap (a small answer must never cost more).
mkdir -p corpus/registry
printf '\000{"layers":[{"mediaType":"application/vnd.airlock.manifest.v1+json","digest":"sha256:%064d","size":9},{"mediaType":"application/vnd.airlock.signature.v1","digest":"sha256:%064d","size":3}]}' 0 1 >corpus/registry/image
printf '\001{"torch_dtype":"bfloat16","quantization_config":{"quant_method":"gptq"}}' >corpus/registry/config
printf '\002{"token":"abc","access_token":"def"}' >corpus/registry/token
printf '\003{"errors":[{"code":"DENIED","message":"requested access to the resource is denied"}]}' >corpus/registry/error
printf '\004Bearer realm="https://auth.site/token",service="registry.site",scope="repository:a:pull"' >corpus/registry/challenge
printf '\015\144\000\000\000\000\000\000\000bytes 40-199/200' >corpus/registry/range
printf '\006sha256:%064d\n{"schemaVersion":2}' 0 >corpus/registry/digest
printf '\007https://registry.site:5000/v2/m/blobs/uploads/x?_state=y' >corpus/registry/origin
echo "== registry: ${secs}s"
cargo fuzz run registry corpus/registry -- -max_total_time="$secs" -rss_limit_mb=512 -malloc_limit_mb=512 -max_len=65536 2>&1 \
  | grep -E "^#[0-9]+.*(DONE|pulse)|Done [0-9]+ runs|ERROR|SUMMARY" | tail -3
