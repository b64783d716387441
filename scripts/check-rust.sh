#!/usr/bin/env bash
# Stops early, with the fix, when cargo is missing or older than the Rust version airlock needs
# (Cargo.toml's rust-version). scripts/demo.sh and scripts/test.sh run it first: an old
# distribution cargo would otherwise fail minutes into the build, on the first new feature.
set -euo pipefail
cd "$(dirname "$0")/.."
need="$(sed -n 's/^rust-version = "\([0-9.]*\)"/\1/p' Cargo.toml)"
[ -n "$need" ] || { echo "check-rust.sh: Cargo.toml has no rust-version" >&2; exit 1; }
fix() {
    cat >&2 <<MSG
airlock needs Rust $need or later (edition 2024). The cargo that Debian and Ubuntu package is
older on most of their releases. Install the current toolchain with rustup:

    curl --proto '=https' --tlsv1.2 -sSf https://sh.rustup.rs | sh -s -- -y --profile minimal
    . "\$HOME/.cargo/env"

then run this script again (rustup's cargo, in ~/.cargo/bin, must come first in PATH).
MSG
    exit 1
}
if ! have="$(cargo --version 2>/dev/null)"; then
    echo "$0: cargo was not found." >&2
    fix
fi
version="$(printf '%s\n' "$have" | awk '{print $2}' | cut -d- -f1)"
oldest="$(printf '%s\n%s\n' "$need" "$version" | sort -V | head -n 1)"
if [ "$oldest" != "$need" ]; then
    echo "$0: $have is too old ($(command -v cargo))." >&2
    fix
fi
