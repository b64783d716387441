#!/usr/bin/env bash
# Builds airlock in release mode (if needed) and installs the binary and its man pages, so the
# README's bare `airlock` works: /usr/local/bin when run as root, else ~/.local/bin (which most
# shells have on PATH; the script says when yours does not). Usage: scripts/install.sh [PREFIX]
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/check-rust.sh
if [ "$(id -u)" = 0 ]; then prefix=${1:-/usr/local}; else prefix=${1:-$HOME/.local}; fi
echo "== building airlock: cargo build --release --locked (about 3 minutes on 2 cores the first time)"
cargo build --release --locked
bin=${CARGO_TARGET_DIR:-$PWD/target}/release/airlock
install -d -m 0755 "$prefix/bin"
install -m 0755 "$bin" "$prefix/bin/airlock"
echo "installed $prefix/bin/airlock ($("$prefix/bin/airlock" --version))"
scripts/install-man.sh --airlock "$prefix/bin/airlock" "$prefix/share/man"
echo "installed the man pages under $prefix/share/man (man airlock, man airlock-unpack, ...)"
case ":$PATH:" in
    *":$prefix/bin:"*) ;;
    *) echo "note: $prefix/bin is not on your PATH: export PATH=\"$prefix/bin:\$PATH\"" ;;
esac
