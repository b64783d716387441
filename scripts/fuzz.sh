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

# The delta patch decoders and parity (issue 26), each under a memory cap: a patch may make the
# decoder hold a zstd window (at most 128 MiB) and a safetensors header; a parity rebuild holds
# at most 80 MiB whatever the geometry. Seeds: safetensors pairs in both modes (patch input:
# flags byte, 2-byte base length, base, new file or patch), and real parity bundles packed here
# (a 0 byte, then the volumes target's layout with the parity volumes after the data volumes).
mkdir -p corpus/patch corpus/parity
st=../testdata/fixtures/valid
python3 - "$st" <<'PY'
import struct, sys
st = sys.argv[1]
def seed(name, flags, base, rest):
    open("corpus/patch/" + name, "wb").write(bytes([flags]) + struct.pack("<H", len(base)) + base + rest)
small = open(st + "/small.safetensors", "rb").read()
shard1 = open(st + "/sharded/model-00001-of-00003.safetensors", "rb").read()
shard2 = open(st + "/sharded/model-00002-of-00003.safetensors", "rb").read()
changed = bytearray(small); changed[-5] ^= 0x10
for flags in (0, 1, 4, 5, 8, 9, 12, 13):
    seed(f"small-{flags}", flags, small, bytes(changed))
    seed(f"shards-{flags}", flags, shard1, shard2)
seed("raw-bytes", 2, small, struct.pack("<I", len(small)) + bytes(16))
PY
bin=(cargo run --quiet --locked --manifest-path ../Cargo.toml --)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"${bin[@]}" keygen --out "$work/k" --unencrypted >/dev/null
mkdir -p "$work/m"
head -c 20000 /dev/urandom >"$work/m/weights.bin"
printf '{"model_type": "test"}\n' >"$work/m/config.json"
for c in none zstd; do
  for p in 10 50; do
    b="$work/b-$c-$p"
    "${bin[@]}" pack "$work/m" -o "$b" --key "$work/k.key" --compress "$c" --parity "$p" \
      --chunk-size 4096 --volume-size 8192 >/dev/null 2>&1
    out="corpus/parity/$c-$p"
    printf '\0' >"$out"
    python3 -c 'import struct,sys; sys.stdout.buffer.write(struct.pack("<I", int(sys.argv[1])))' \
      "$(stat -c %s "$b/manifest.json")" >>"$out"
    cat "$b/manifest.json" "$b"/data.* "$b"/parity.* >>"$out"
  done
done
printf '\1\0\x40\0\x10\0\x04\0\x07\x01\x02\x03\x05\x00\x00' >corpus/parity/geometry
# What pack chooses (the choice mode): a few volume sizes, payloads and asks, 1vol among them.
printf '\3\x0e\0\0\0\xe0\x11\0\0\x09' >corpus/parity/choice-10
printf '\3\x0c\0\0\0\0\x08\0\0\x18' >corpus/parity/choice-25
printf '\3\x0e\0\0\0\xe0\x11\0\0\xf0' >corpus/parity/choice-1vol
for t in patch parity; do
  echo "== $t: ${secs}s"
  cargo fuzz run "$t" "corpus/$t" -- -max_total_time="$secs" -rss_limit_mb=1024 \
    -malloc_limit_mb=512 -max_len=1048576 2>&1 \
    | grep -E "^#[0-9]+.*(DONE|pulse)|Done [0-9]+ runs|ERROR|SUMMARY" | tail -3
done

# The value scan (issue 23): seeds are the value fixtures and the valid model files, each behind
# a byte choosing the piece size the scanner is fed in; a layout holds a few words per tensor,
# so the memory cap is small.
mkdir -p corpus/values
i=0
for f in ../testdata/fixtures/values/*.safetensors ../testdata/fixtures/values/*.gguf \
  ../testdata/fixtures/values/healthy/* ../testdata/fixtures/valid/*.safetensors \
  ../testdata/fixtures/valid/*.gguf; do
  [ -f "$f" ] && [ "$(stat -c %s "$f")" -le 1048576 ] || continue
  { printf "\\$(printf '%03o' $((i % 8)))"; cat "$f"; } >"corpus/values/$(basename "$f")"
  i=$((i + 1))
done
echo "== values: ${secs}s"
cargo fuzz run values corpus/values -- -max_total_time="$secs" -rss_limit_mb=512 \
  -malloc_limit_mb=512 -max_len=1048576 2>&1 \
  | grep -E "^#[0-9]+.*(DONE|pulse)|Done [0-9]+ runs|ERROR|SUMMARY" | tail -3
