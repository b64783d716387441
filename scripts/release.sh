#!/usr/bin/env bash
# Build airlock for the far side of the gap: a fully static x86_64 Linux binary (no glibc
# version to match on an older target), its SHA-256 and a minisign signature that stock
# `minisign -V` verifies. See docs/RUNBOOK.md, section 1 "Bring airlock across".
#
#   scripts/release.sh --key KEY.key -o DIR [--password-file FILE] [--binary FILE]
#
# --binary FILE skips the build and signs FILE as it is (the test suite uses it to check the
# signing path; a dynamically linked FILE is reported, not refused).
# Writes DIR/airlock-VERSION-x86_64-linux, .sha256 and .minisig; DIR is created if missing and
# must not already hold those names.
set -euo pipefail

usage() {
    sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//' >&2
    exit 2
}

key="" out="" password_file="" binary=""
while [ $# -gt 0 ]; do
    case "$1" in
        --key) key="${2:?--key needs a file}"; shift 2 ;;
        -o|--output) out="${2:?-o needs a directory}"; shift 2 ;;
        --password-file) password_file="${2:?--password-file needs a file}"; shift 2 ;;
        --binary) binary="${2:?--binary needs a file}"; shift 2 ;;
        -h|--help) usage ;;
        *) echo "release.sh: unknown argument: $1" >&2; usage ;;
    esac
done
[ -n "$key" ] && [ -n "$out" ] || usage
[ -r "$key" ] || { echo "release.sh: error: $key: cannot read the secret key" >&2; exit 1; }
if [ -n "$password_file" ] && [ ! -r "$password_file" ]; then
    echo "release.sh: error: $password_file: cannot read the password file" >&2
    exit 1
fi

root="$(cd "$(dirname "$0")/.." && pwd)"
target=x86_64-unknown-linux-gnu
static=yes
if [ -z "$binary" ]; then
    # +crt-static on the gnu target links glibc statically; no musl toolchain needed. The
    # separate target directory keeps these flags from invalidating the everyday build.
    echo "release.sh: building a static $target binary (cargo build --release)..." >&2
    (cd "$root" && RUSTFLAGS="-C target-feature=+crt-static" \
        cargo build --release --locked --target "$target" --target-dir target/static)
    binary="$root/target/static/$target/release/airlock"
else
    static=unknown
fi
[ -x "$binary" ] || { echo "release.sh: error: $binary: not an executable" >&2; exit 1; }

# Static means no interpreter and no shared libraries; `ldd` says "not a dynamic executable"
# (or "statically linked") for such a file.
if ldd_out="$(ldd "$binary" 2>&1)"; then :; fi
case "$ldd_out" in
    *"not a dynamic executable"*|*"statically linked"*) linked=static ;;
    *) linked=dynamic ;;
esac
if [ "$linked" != static ]; then
    if [ "$static" = yes ]; then
        echo "release.sh: error: $binary is dynamically linked:" >&2
        echo "$ldd_out" >&2
        exit 1
    fi
    echo "release.sh: warning: $binary is dynamically linked; the target needs the same libraries" >&2
fi
# It must run with an empty environment, as it may on a minimal target.
version="$(env -i "$binary" --version | awk '{print $2}')"
[ -n "$version" ] || { echo "release.sh: error: $binary --version printed nothing" >&2; exit 1; }

name="airlock-$version-x86_64-linux"
mkdir -p "$out"
for f in "$name" "$name.sha256" "$name.minisig"; do
    if [ -e "$out/$f" ]; then
        echo "release.sh: error: $out/$f already exists; choose another directory" >&2
        exit 2
    fi
done
cp "$binary" "$out/$name.tmp"
chmod 0755 "$out/$name.tmp"
mv "$out/$name.tmp" "$out/$name"
(cd "$out" && sha256sum "$name" > "$name.sha256")
# Signed by the binary itself, with airlock's own minisign-compatible signing code.
sign_args=(sign "$out/$name" --key "$key")
[ -n "$password_file" ] && sign_args+=(--password-file "$password_file")
"$binary" "${sign_args[@]}" >&2

# Check the result the way the target will, with stock minisign, when it is here.
pub="${key%.key}.pub"
if command -v minisign >/dev/null && [ -r "$pub" ]; then
    minisign -Vm "$out/$name" -p "$pub" >&2
fi
size=$(stat -c %s "$out/$name")
echo "release.sh: $out/$name ($size bytes, $linked), $name.sha256, $name.minisig" >&2
