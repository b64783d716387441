#!/usr/bin/env bash
# Mutation testing of airlock's parsers and refusal rules: does the test suite notice when a rule
# is broken? Not part of CI (hours on 2 cores); run it before calling a change to these files done
# and record the figures in docs/TESTING.md.
#
#   scripts/mutants.sh                 every file below
#   scripts/mutants.sh src/tar.rs ...  only these (a glob such as 'src/inspect/*.rs' works)
#
# Per file, two stages with a fast test selection:
#   1. the library's unit tests (`cargo test --lib`);
#   2. the mutants that survived stage 1, against the hostile integration tests
#      (`cargo test --test it hostile::`), which check exact refusal messages end to end.
# Then it prints caught / missed / equivalent / unviable / timeout per file. A missed mutant is
# "equivalent" when docs/TESTING.md lists it (section "Equivalent mutants", one line per mutant as
# `` `FILE: DESCRIPTION` ``, line numbers left out so the list survives edits) with the reason it
# cannot change behaviour. Exit status 1 if any mutant is missed and not listed as equivalent.
#
# Environment: MUTANTS_OUT (default target/mutants), MUTANTS_TIMEOUT (seconds per test run;
# default: cargo-mutants sets it from the unmutated run, at least 20 s, so a mutant that loops
# forever costs little), MUTANTS_IN_PLACE and MUTANTS_JOBS (below).
# For a quick partial run: MUTANTS_LIB_FILTER narrows stage 1 to unit tests whose names contain
# it (e.g. "tar::"; a mutant caught only elsewhere then counts as missed), MUTANTS_STAGE2=0 skips
# stage 2, MUTANTS_SHARD=k/n tests one n-th of the mutants, MUTANTS_RE / MUTANTS_EXCLUDE_RE keep
# / drop mutants whose description matches a regex (cargo-mutants -F / -E, e.g. a function
# name), MUTANTS_TEST_ARGS adds arguments for the unit-test binary in stage 1 (e.g. "--skip
# slow_test_name").
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v cargo-mutants >/dev/null; then
    echo "cargo-mutants is not installed: cargo install --locked cargo-mutants" >&2
    exit 2
fi

jobs=${MUTANTS_JOBS:-1}
out_root=${MUTANTS_OUT:-target/mutants}
if [ $# -gt 0 ]; then
    files=("$@")
else
    files=(src/paths.rs src/tar.rs src/manifest.rs src/keys.rs 'src/inspect/*.rs')
fi

# Each mutant rebuilds only the airlock crate: build it without optimisation or debug info (the
# dependencies keep their profile, so nothing else is rebuilt).
fast=()
for profile in dev test; do
    fast+=(-C "--config=profile.$profile.package.airlock.opt-level=0")
    fast+=(-C "--config=profile.$profile.package.airlock.debug=0")
done
# Where the mutants are built. cargo-mutants' own copy (--copy-target) does not keep file times,
# so cargo then rebuilds most dependencies in it (measured: more than 6 minutes before the first
# mutant, on each run). Instead the tree is copied here with `cp -a` (times kept, only
# target/debug) and mutated in place in that copy, one mutant at a time: the unmutated build then
# takes about 15 s and each mutant about 10 s. MUTANTS_IN_PLACE=1 mutates this tree itself
# (do not edit or interrupt it while it runs); MUTANTS_JOBS>1 uses cargo-mutants' copies.
root=$(pwd)
case "$out_root" in /*) ;; *) out_root="$root/$out_root" ;; esac
scratch=
if [ "${MUTANTS_IN_PLACE:-0}" = 1 ]; then
    place=(--in-place)
elif [ "$jobs" -gt 1 ]; then
    place=(--copy-target=true --jobs "$jobs")
else
    scratch=$(mktemp -d "${TMPDIR:-/tmp}/airlock-mutants.XXXXXX")
    for entry in * .cargo; do
        if [ -e "$entry" ] && [ "$entry" != target ]; then
            cp -a "$entry" "$scratch/"
        fi
    done
    if [ -d target/debug ]; then
        mkdir "$scratch/target"
        cp -a target/debug "$scratch/target/"
    fi
    place=(--in-place)
fi
if [ -n "$scratch" ]; then
    cd "$scratch"
fi

# The equivalent mutants named in docs/TESTING.md, without line numbers.
equivalent=$(mktemp)
trap 'rm -f "$equivalent"; if [ -n "$scratch" ]; then rm -rf "$scratch"; fi' EXIT
sed -n '/^## Equivalent mutants/,/^## /p' "$root/docs/TESTING.md" |
    sed -n 's/^- `\([^`]*\)`.*/\1/p' >"$equivalent"

# "src/tar.rs:123:45: replace > with >= in f" -> "src/tar.rs: replace > with >= in f"
strip_lines() { sed -E 's/^([^:]+):[0-9]+:[0-9]+:/\1:/'; }
count() { if [ -f "$1" ]; then wc -l <"$1" | tr -d ' '; else echo 0; fi; }

status=0
printf '%-22s %7s %7s %7s %11s %9s %8s\n' file mutants caught missed equivalent unviable timeout
for f in "${files[@]}"; do
    name=$(printf '%s' "$f" | tr '/*' '__')
    dir="$out_root/$name"
    mkdir -p "$dir"
    common=(--file "$f" --output "$dir" "${place[@]}" "${fast[@]}")
    if [ -n "${MUTANTS_TIMEOUT:-}" ]; then
        common+=(--timeout "$MUTANTS_TIMEOUT")
    fi
    if [ -n "${MUTANTS_SHARD:-}" ]; then
        common+=(--shard "$MUTANTS_SHARD")
    fi
    if [ -n "${MUTANTS_RE:-}" ]; then
        common+=(--re "$MUTANTS_RE")
    fi
    if [ -n "${MUTANTS_EXCLUDE_RE:-}" ]; then
        common+=(--exclude-re "$MUTANTS_EXCLUDE_RE")
    fi
    # Stage 1: library tests.
    filter=()
    if [ -n "${MUTANTS_LIB_FILTER:-}" ]; then
        filter=("$MUTANTS_LIB_FILTER")
    fi
    if [ -n "${MUTANTS_TEST_ARGS:-}" ]; then
        # shellcheck disable=SC2206 # words on purpose
        filter+=(-- $MUTANTS_TEST_ARGS)
    fi
    # (-C reaches the build step too, so only the tests that run are built.)
    cargo mutants "${common[@]}" -C --lib -- "${filter[@]}" >"$dir/stage1.log" 2>&1 || true
    s1="$dir/stage1"
    rm -rf "$s1"
    cp -r "$dir/mutants.out" "$s1"
    total=$(($(count "$s1/caught.txt") + $(count "$s1/missed.txt") + $(count "$s1/unviable.txt") + $(count "$s1/timeout.txt")))
    caught=$(count "$s1/caught.txt")
    missed_file="$s1/missed.txt"
    timeouts=$(count "$s1/timeout.txt")
    # Stage 2: survivors against the hostile integration tests (--iterate skips what stage 1
    # caught or found unviable).
    if [ "$(count "$s1/missed.txt")" -gt 0 ] && [ "${MUTANTS_STAGE2:-1}" != 0 ]; then
        cargo mutants "${common[@]}" --iterate -C --test=it -- hostile:: >"$dir/stage2.log" 2>&1 || true
        caught=$((caught + $(count "$dir/mutants.out/caught.txt")))
        missed_file="$dir/mutants.out/missed.txt"
        timeouts=$((timeouts + $(count "$dir/mutants.out/timeout.txt")))
    fi
    strip_lines <"$missed_file" 2>/dev/null | sort >"$dir/missed-stripped.txt" || true
    # Each line of the list excuses one missed mutant: two mutants with the same description
    # (line numbers stripped) need two lines, so an equivalent one cannot hide a real survivor.
    : >"$dir/survivors.txt"
    awk -v out="$dir/survivors.txt" 'NR == FNR { eq[$0]++; next }
        eq[$0] > 0 { eq[$0]--; n++; next }
        { print > out }
        END { print n + 0 }' "$equivalent" "$dir/missed-stripped.txt" >"$dir/equivalent-count"
    eq=$(cat "$dir/equivalent-count")
    missed=$(count "$dir/survivors.txt")
    printf '%-22s %7s %7s %7s %11s %9s %8s\n' "$f" "$total" "$caught" "$missed" "$eq" \
        "$(count "$s1/unviable.txt")" "$timeouts"
    if [ "$missed" -gt 0 ]; then
        status=1
        sed 's/^/    missed: /' "$dir/survivors.txt"
    fi
done
exit $status
