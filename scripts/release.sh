#!/usr/bin/env bash
# Build airlock for the far side of the gap: a fully static Linux binary (no glibc version to
# match on an older target), its SHA-256 and a minisign signature that stock `minisign -V` and
# an airlock already on the target (`airlock verify FILE`) verify. See docs/RUNBOOK.md,
# section 0 "Bring airlock across".
#
#   scripts/release.sh --key KEY.key -o DIR [--arch x86_64|aarch64] [--password-file FILE]
#                      [--binary FILE]
#
# --arch aarch64 cross-builds on an x86_64 host: it needs the Rust target
# (`rustup target add aarch64-unknown-linux-gnu`) and Debian's gcc-aarch64-linux-gnu (a C cross
# compiler and linker, with the static aarch64 glibc); with qemu-user installed the binary is
# also run once under qemu-aarch64. --binary FILE skips the build and signs FILE as it is (the
# test suite uses it): a dynamically linked FILE is named ...-linux-dynamic, never like a
# release. Writes DIR/airlock-VERSION-ARCH-linux, .sha256 and .minisig; DIR is created if
# missing and must not already hold those names.
set -euo pipefail

usage() {
    sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//' >&2
    exit 2
}

key="" out="" password_file="" binary="" arch=x86_64
while [ $# -gt 0 ]; do
    case "$1" in
        --key) key="${2:?--key needs a file}"; shift 2 ;;
        -o|--output) out="${2:?-o needs a directory}"; shift 2 ;;
        --password-file) password_file="${2:?--password-file needs a file}"; shift 2 ;;
        --binary) binary="${2:?--binary needs a file}"; shift 2 ;;
        --arch) arch="${2:?--arch needs x86_64 or aarch64}"; shift 2 ;;
        -h|--help) usage ;;
        *) echo "release.sh: unknown argument: $1" >&2; usage ;;
    esac
done
[ -n "$key" ] && [ -n "$out" ] || usage
case "$arch" in
    x86_64|aarch64) ;;
    *) echo "release.sh: error: --arch $arch: x86_64 or aarch64" >&2; exit 2 ;;
esac
[ -r "$key" ] || { echo "release.sh: error: $key: cannot read the secret key" >&2; exit 1; }
if [ -n "$password_file" ] && [ ! -r "$password_file" ]; then
    echo "release.sh: error: $password_file: cannot read the password file" >&2
    exit 1
fi

root="$(cd "$(dirname "$0")/.." && pwd)"
host="$(uname -m)"
target="$arch-unknown-linux-gnu"
built=no
if [ -z "$binary" ]; then
    "$root/scripts/check-rust.sh"
    env_cross=()
    if [ "$arch" != "$host" ]; then
        cc="$arch-linux-gnu-gcc"
        if command -v rustup >/dev/null && ! rustup target list --installed | grep -qx "$target"; then
            echo "release.sh: error: the Rust target $target is not installed: rustup target add $target" >&2
            exit 1
        fi
        if ! command -v "$cc" >/dev/null; then
            echo "release.sh: error: $cc (the C cross compiler and linker for $arch) is missing: apt-get install gcc-$arch-linux-gnu" >&2
            exit 1
        fi
        upper="$(printf '%s' "$target" | tr 'a-z-' 'A-Z_')"
        env_cross=("CARGO_TARGET_${upper}_LINKER=$cc" "CC_${target//-/_}=$cc" "AR_${target//-/_}=$arch-linux-gnu-ar")
    fi
    # +crt-static on the gnu target links glibc statically; no musl toolchain needed. The
    # separate target directory keeps these flags from invalidating the everyday build.
    echo "release.sh: building a static $target binary (cargo build --release)..." >&2
    (cd "$root" && env "${env_cross[@]}" RUSTFLAGS="-C target-feature=+crt-static" \
        cargo build --release --locked --target "$target" --target-dir target/static)
    binary="$root/target/static/$target/release/airlock"
    built=yes
fi
[ -x "$binary" ] || { echo "release.sh: error: $binary: not an executable" >&2; exit 1; }

# The binary's architecture and linking, from its ELF headers (ldd cannot judge a foreign
# binary). Static means no program interpreter and no shared library needed.
machine="$(readelf -h "$binary" | sed -n 's/^ *Machine: *//p')"
case "$machine" in
    *X86-64*) elf_arch=x86_64 ;;
    *AArch64*) elf_arch=aarch64 ;;
    *) echo "release.sh: error: $binary is not an x86_64 or aarch64 ELF executable ($machine)" >&2; exit 1 ;;
esac
if [ "$elf_arch" != "$arch" ]; then
    echo "release.sh: error: $binary is an $elf_arch binary, not $arch (pass --arch $elf_arch)" >&2
    exit 1
fi
if readelf -l "$binary" | grep -q 'INTERP' || readelf -d "$binary" | grep -q '(NEEDED)'; then
    linked=dynamic
else
    linked=static
fi
if [ "$linked" != static ]; then
    if [ "$built" = yes ]; then
        echo "release.sh: error: $binary is dynamically linked:" >&2
        readelf -d "$binary" | grep '(NEEDED)' >&2 || true
        exit 1
    fi
    echo "release.sh: warning: $binary is dynamically linked: it runs only where its shared libraries are (this host's glibc or a newer one); it is named ...-linux-dynamic, not like a release" >&2
fi

# It must run with an empty environment, as it may on a minimal target: natively, or under
# qemu-user for another architecture when qemu is here.
runner=()
if [ "$arch" != "$host" ]; then
    qemu="$(command -v "qemu-$arch" || command -v "qemu-$arch-static" || true)"
    if [ -n "$qemu" ]; then
        runner=("$qemu")
    fi
fi
if [ "$arch" = "$host" ] || ((${#runner[@]})); then
    version="$(env -i "${runner[@]}" "$binary" --version | awk '{print $2}')"
    [ -n "$version" ] || { echo "release.sh: error: $binary --version printed nothing" >&2; exit 1; }
    ran="ran under env -i${runner:+ (${runner[0]##*/})}"
else
    version="$(sed -n 's/^version = "\(.*\)"/\1/p' "$root/Cargo.toml" | head -n 1)"
    ran="NOT RUN: no qemu-$arch on this host (apt-get install qemu-user to run it once here)"
fi

name="airlock-$version-$arch-linux"
[ "$linked" = static ] || name="$name-dynamic"
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

# Signed with airlock's own minisign-compatible signing code: by the binary itself when it
# runs here, else by this host's airlock ($AIRLOCK, or a native release build).
signer="$binary"
if [ "$arch" != "$host" ]; then
    signer="${AIRLOCK:-}"
    if [ -z "$signer" ]; then
        (cd "$root" && cargo build --release --locked)
        signer="$root/target/release/airlock"
    fi
fi
sign_args=(sign "$out/$name" --key "$key")
[ -n "$password_file" ] && sign_args+=(--password-file "$password_file")
"$signer" "${sign_args[@]}" >&2

# Check the result the way the target will: with stock minisign when it is here, and with
# airlock itself (`airlock verify FILE`), as an airlock already on the target checks its next
# release.
pub="${key%.key}.pub"
if [ -r "$pub" ]; then
    if command -v minisign >/dev/null; then
        minisign -Vm "$out/$name" -p "$pub" >&2
    fi
    "$signer" verify "$out/$name" --trust "$pub" >&2
fi
size=$(stat -c %s "$out/$name")
sha="$(cut -d' ' -f1 "$out/$name.sha256")"
echo "release.sh: $out/$name ($size bytes, $arch, $linked, $ran), $name.sha256, $name.minisig" >&2
echo "release.sh: sha256 $sha  (read it out over the phone: the target checks it with sha256sum before anything else)" >&2
