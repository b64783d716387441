#!/usr/bin/env bash
# Install airlock's manual pages: airlock(1) and airlock-COMMAND(1) for every command.
#
#   scripts/install-man.sh [--airlock BIN] [MANDIR]
#
# MANDIR defaults to /usr/local/share/man; pages go to MANDIR/man1. BIN defaults to the
# `airlock` on PATH. Then `man airlock-unpack` works (run `mandb` if your man needs an index).
set -euo pipefail

airlock=airlock
mandir=/usr/local/share/man
while [ $# -gt 0 ]; do
    case "$1" in
        --airlock) airlock="${2:?--airlock needs a path}"; shift 2 ;;
        -h|--help) sed -n '2,8p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        -*) echo "install-man.sh: unknown option: $1" >&2; exit 2 ;;
        *) mandir="$1"; shift ;;
    esac
done

# The commands with a page of their own (`airlock man --help` lists the same).
commands=(keygen pack verify copy unpack inspect check sign repair push cosign trust completions)

install -d -m 0755 "$mandir/man1"
"$airlock" man > "$mandir/man1/airlock.1.tmp"
mv "$mandir/man1/airlock.1.tmp" "$mandir/man1/airlock.1"
chmod 0644 "$mandir/man1/airlock.1"
for c in "${commands[@]}"; do
    "$airlock" man "$c" > "$mandir/man1/airlock-$c.1.tmp"
    mv "$mandir/man1/airlock-$c.1.tmp" "$mandir/man1/airlock-$c.1"
    chmod 0644 "$mandir/man1/airlock-$c.1"
done
echo "installed $((${#commands[@]} + 1)) pages into $mandir/man1" >&2
