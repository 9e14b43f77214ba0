#!/usr/bin/env bash
# Fuzz every cargo-fuzz target of protocol/fuzz for SECONDS each (default 30,
# what CI runs; the documented long runs use 600), one target per core at a
# time, and fail on the first finding (a crash, leak or timeout: libFuzzer
# exits non-zero and leaves the input under protocol/fuzz/artifacts/<target>/).
#
#   scripts/fuzz.sh [SECONDS] [TARGET...]
#
# Needs cargo-fuzz (`cargo install --locked cargo-fuzz`) and a C++ compiler
# (libfuzzer-sys builds libFuzzer). The stable toolchain is used;
# RUSTC_BOOTSTRAP=1 unlocks the nightly flags cargo-fuzz passes
# (-Zsanitizer=address). The corpus grows under protocol/fuzz/corpus/
# (git-ignored) and is reused by the next run.
set -euo pipefail
cd "$(dirname "$0")/../protocol"

secs="${1:-30}"
shift || true
case "$secs" in
  '' | *[!0-9]*) echo "fuzz.sh: SECONDS must be a whole number (got '$secs')" >&2; exit 2 ;;
esac
if ! cargo fuzz --version >/dev/null 2>&1; then
  echo "fuzz.sh: cargo-fuzz is missing; install it with: cargo install --locked cargo-fuzz" >&2
  exit 2
fi
export RUSTC_BOOTSTRAP=1

if [ "$#" -gt 0 ]; then
  targets=("$@")
else
  mapfile -t targets < <(cargo fuzz list)
fi
[ "${#targets[@]}" -gt 0 ] || { echo "fuzz.sh: no fuzz targets found" >&2; exit 2; }

# One build of all targets first, so each target's SECONDS are spent fuzzing.
start=$(date +%s)
cargo fuzz build
echo "fuzz.sh: built ${#targets[@]} targets in $(($(date +%s) - start)) s"

# Targets run side by side, one per core (MURMUR_FUZZ_JOBS, default
# nproc): libFuzzer is single-threaded, so each still gets SECONDS of a
# whole core, and CI's two cores fuzz two targets at once.
jobs="${MURMUR_FUZZ_JOBS:-$(nproc 2>/dev/null || echo 1)}"
case "$jobs" in
  '' | *[!0-9]* | 0) echo "fuzz.sh: MURMUR_FUZZ_JOBS must be a whole number above 0 (got '$jobs')" >&2; exit 2 ;;
esac
logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT
fuzz_one() {
  local t="$1" t0 log="$logs/$1.log" execs
  t0=$(date +%s)
  # -max_len bounds each input (the decoders' interesting structure fits in
  # 4 KiB); -print_final_stats gives the execution count for the log.
  if ! cargo fuzz run "$t" -- -max_total_time="$secs" -max_len=4096 -print_final_stats=1 >"$log" 2>&1; then
    tail -n 60 "$log" >&2
    if compgen -G "fuzz/artifacts/$t/*" >/dev/null; then
      echo "fuzz.sh: $t FOUND A FAILURE; the input is under protocol/fuzz/artifacts/$t/:" >&2
      ls -1 "fuzz/artifacts/$t/" >&2
    else
      echo "fuzz.sh: cargo fuzz run $t failed (see the output above)" >&2
    fi
    return 1
  fi
  execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo '?')
  echo "fuzz.sh: $t: no finding, $execs executions in $(($(date +%s) - t0)) s"
}
failed=0 running=0
for t in "${targets[@]}"; do
  if [ "$running" -ge "$jobs" ]; then
    wait -n || failed=1
    running=$((running - 1))
  fi
  [ "$failed" -eq 0 ] || break
  fuzz_one "$t" &
  running=$((running + 1))
done
while [ "$running" -gt 0 ]; do
  wait -n || failed=1
  running=$((running - 1))
done
[ "$failed" -eq 0 ] || exit 1
echo "fuzz.sh: all ${#targets[@]} targets clean, $jobs at a time, $(($(date +%s) - start)) s in all"
