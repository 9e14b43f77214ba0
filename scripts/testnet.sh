#!/usr/bin/env bash
# The README's first command: build the release binaries, then run a local
# murmur network on 127.0.0.1 — a bootstrap server, N training nodes (default
# 4) and the dashboard — on the built-in Tiny Shakespeare dataset (`--data
# synthetic` for the synthetic language and its known entropy floor). It prints the
# dashboard's URL and one line per round, keeps a log per process under
# target/testnet/logs, and Ctrl-C stops every process it started.
#
#   scripts/testnet.sh                       # 4 nodes until Ctrl-C
#   scripts/testnet.sh --nodes 6 --chaos     # kill and restart a random node every 2 rounds
#   scripts/testnet.sh --join-late 1         # one node joins after round 3
#   scripts/testnet.sh --rounds 10           # stop after 10 rounds, check the nodes agree
#   scripts/testnet.sh --nodes 16 --committee-size 4   # committees of 4 instead of one owner per shard
#   scripts/testnet.sh --help                # every option
set -euo pipefail
cd "$(dirname "$0")/.."
target="${CARGO_TARGET_DIR:-target}"
if [ "${MURMUR_TESTNET_NO_BUILD:-0}" != "1" ]; then
  # The same build as scripts/test.sh, so the two share every artifact.
  cargo build --release --workspace --bins
fi
exec "$target/release/murmur" testnet "$@"
