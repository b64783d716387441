#!/usr/bin/env bash
# Makes testdata/parity-whole-chunk/: a bundle with parity as airlock wrote them before parity
# units became granular (issue 24), kept so that bundles already written stay readable and
# repairable (tests/it/parity_units.rs reads it, damages copies of it and repairs them).
#
# Before issue 24, `pack --parity` used the bundle's `chunk_size` as the parity unit whatever
# the volume size, so a volume shorter than a chunk made one unit zero-padded to the chunk size.
# This fixture has that shape at a size fit for a repository: 64 KiB chunks, volumes of 40000
# bytes (each volume one short chunk, padded in the parity), 25% asked. The format did not
# change (FORMAT.md section 17: the unit is the chunk); what changed is how `pack` chooses the
# chunk size of a bundle with parity, so this is also the layout any other writer may produce.
#
#   scripts/make-parity-fixture.sh PATH/TO/airlock     # an airlock built before issue 24
#
# Deterministic: the model comes from a seeded generator, SOURCE_DATE_EPOCH fixes `created`,
# the stream is stored (no compression) and Ed25519 signatures are deterministic, so the same
# binary makes the same bytes. The binary that made the checked-in copy: the `pipeline` branch
# at commit 7520858 (airlock 0.1.0).
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
BIN=${1:?usage: make-parity-fixture.sh AIRLOCK_BINARY}
OUT=$REPO/testdata/parity-whole-chunk
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
python3 - "$WORK/model" <<'EOF'
import json, os, random, sys
d = sys.argv[1]
os.makedirs(d)
rng = random.Random(20261203)
with open(os.path.join(d, "weights.bin"), "wb") as f:
    f.write(rng.randbytes(300_000))
with open(os.path.join(d, "config.json"), "w") as f:
    json.dump({"model_type": "parity-fixture"}, f)
    f.write("\n")
EOF
rm -rf "$OUT"
SOURCE_DATE_EPOCH=1764720000 "$BIN" pack "$WORK/model" -o "$OUT" \
    --key "$REPO/testdata/keys/test.key" --name parity-fixture --compress none \
    --volume-size 40000 --chunk-size 65536 --parity 25% --progress none
cp -r "$WORK/model" "$OUT.model"
rm -rf "$REPO/testdata/parity-whole-chunk-model"
mv "$OUT.model" "$REPO/testdata/parity-whole-chunk-model"
ls -l "$OUT"
