#!/usr/bin/env bash
# The whole test suite: installs what the tests need (scripts/setup.sh), checks formatting and
# lints, then runs every unit and integration test against the real minisign, zstd, GNU tar and
# Python readers. Usage: scripts/test.sh [extra cargo test args]
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/check-rust.sh
scripts/setup.sh
cargo fmt --all -- --check
cargo clippy --locked --all-targets -- -D warnings
cargo test --locked "$@"
