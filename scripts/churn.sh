#!/usr/bin/env bash
# The churn figure (issue 18): the same local run twice, on 127.0.0.1 with
# the built-in Tiny Shakespeare — once with no faults, once with a quarter of
# the nodes SIGKILLed and restarted every EVERY rounds (`murmur testnet
# --chaos --chaos-fraction 0.25`, victims drawn from the seed) — and the
# validation loss each reached: the mean over rounds ROUNDS−4..ROUNDS (the
# loss moves a few percent from one round to the next; the last round's
# value is printed too). Prints one JSON line and
# exits 1 when the churned run's loss is more than 3% (MURMUR_CHURN_TOLERANCE)
# above or below the calm run's, or when either run's nodes did not end on one StateId.
#
# Usage: scripts/churn.sh [nodes=4] [rounds=40] [every=10] [inner_steps=30] [seed=1]
# MURMUR_CHURN_TOLERANCE (default 0.03) is the allowed relative difference.
# (builds the release binaries first; MURMUR_TESTNET_NO_BUILD=1 skips that)
set -euo pipefail
cd "$(dirname "$0")/.."
NODES="${1:-4}"; ROUNDS="${2:-40}"; EVERY="${3:-10}"; H="${4:-30}"; SEED="${5:-1}"
target="${CARGO_TARGET_DIR:-target}"
if [ "${MURMUR_TESTNET_NO_BUILD:-0}" != "1" ]; then
  cargo build --release --workspace --bins
fi
D=$(mktemp -d); trap 'rm -rf "$D"' EXIT
run() { # name, extra testnet arguments…
  local name="$1"; shift
  local t0=$SECONDS
  if ! "$target/release/murmur" testnet --nodes "$NODES" --rounds "$ROUNDS" --inner-steps "$H" \
      --seed "$SEED" --http 127.0.0.1:0 --dir "$D/$name" "$@" >"$D/$name.out" 2>"$D/$name.err"; then
    echo "churn: the $name run failed:" >&2; tail -n 30 "$D/$name.out" "$D/$name.err" >&2; exit 1
  fi
  echo "$name $((SECONDS - t0))" >>"$D/secs"
}
run calm
run churn --chaos --chaos-every "$EVERY" --chaos-fraction 0.25
python3 - "$D" "${MURMUR_CHURN_TOLERANCE:-0.03}" "$NODES" "$ROUNDS" "$EVERY" <<'PY'
import json, re, sys, os
d, tol, (nodes, rounds, every) = sys.argv[1], float(sys.argv[2]), map(int, sys.argv[3:])
secs = dict(l.split() for l in open(os.path.join(d, "secs")))
out = {"figure": "churn", "nodes": nodes, "rounds": rounds, "every": every}
for name in ["calm", "churn"]:
    text = open(os.path.join(d, name + ".out")).read()
    m = re.search(r"^done: all (\d+) surviving nodes are on state \S+ after round \d+; val loss at round \d+: ([0-9.]+) \(mean of rounds \S+: ([0-9.]+)\)$", text, re.M)
    if not m:
        sys.exit(f"churn: the {name} run did not end with its nodes on one state and a val loss:\n{text[-3000:]}")
    out[name + "_val_loss"] = float(m.group(3))
    out[name + "_val_loss_last_round"] = float(m.group(2))
    out[name + "_secs"] = int(secs[name])
    if name == "churn":
        out["kills"] = len(re.findall(r"^chaos: SIGKILL", text, re.M))
        out["restarts"] = len(re.findall(r"^chaos: restarting", text, re.M))
out["ratio"] = round(out["churn_val_loss"] / out["calm_val_loss"], 4)
out["tolerance"] = tol
print(json.dumps(out))
if abs(out["ratio"] - 1) > tol:
    sys.exit(f"churn: the churned run's val loss is more than {tol:.0%} from the calm run's")
if out["kills"] == 0 or out["kills"] != out["restarts"]:
    sys.exit("churn: expected kills, each followed by a restart")
PY
