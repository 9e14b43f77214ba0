#!/usr/bin/env bash
# Network figures: bootstrap + 3 nodes on 127.0.0.1,
# a 4th node started once round 2 has closed; prints the late joiner's time
# from process start to first contributed delta, each node's fraction of wall
# time in inner steps, and bytes sent per node per round.
# Usage: scripts/net-figures.sh [inner_steps] [rounds]   (release binaries first)
set -euo pipefail
cd "$(dirname "$0")/.."
H="${1:-150}"; ROUNDS="${2:-6}"
B=target/release; D=$(mktemp -d); trap 'kill $(jobs -p) 2>/dev/null; rm -rf "$D"' EXIT
$B/murmur-bootstrap --listen /ip4/127.0.0.1/tcp/0 --no-mdns --data-dir "$D/boot" \
  --inner-steps "$H" --batch 4 --quorum 2 --deadline 300 --seed 5 >"$D/boot.out" 2>/dev/null &
until grep -q /tcp/ "$D/boot.out" 2>/dev/null; do sleep 0.2; done
ADDR=$(grep /tcp/ "$D/boot.out" | head -1)
node() { $B/murmur node --json --no-mdns --bootstrap "$ADDR" --data-dir "$D/$1" \
  --listen /ip4/127.0.0.1/tcp/0 --discovery-wait 2 >"$D/$1.out" 2>/dev/null & }
node a; node b; node c
last() { python3 -c 'import json,sys;r=[json.loads(l)["round"] for l in open(sys.argv[1]) if "\"event\":\"round\"" in l];print(max(r) if r else -1)' "$D/$1.out"; }
until [ "$(last a)" -ge 1 ]; do sleep 1; done
node late
until [ "$(last a)" -ge "$ROUNDS" ]; do sleep 1; done
python3 - "$D" <<'PY'
import json, sys, os
d = sys.argv[1]
for n in ["a", "b", "c", "late"]:
    ev = [json.loads(l) for l in open(os.path.join(d, n + ".out")) if l.startswith("{")]
    rounds = [e for e in ev if e["event"] == "round"]
    # Version 1 says `contributed` once; a committee run's round reports
    # say `contributed: true` once shard 0's result included the delta
    # (timed at that report).
    contrib = [e for e in ev if e["event"] == "contributed"]
    contrib = contrib or [dict(e, secs_since_start=e["secs"]) for e in rounds if e.get("contributed") is True]
    sent = [e["bytes_sent"] for e in rounds[1:]]
    print(json.dumps({
        "node": n,
        "rounds": len(rounds),
        "first_contribution_secs": contrib[0]["secs_since_start"] if contrib else None,
        "train_frac": rounds[-1]["train_frac"] if rounds else None,
        "mean_round_secs": (rounds[-1]["secs"] - rounds[0]["secs"]) / max(1, len(rounds) - 1) if rounds else None,
        "bytes_sent_per_round": sum(sent) / len(sent) if sent else None,
        "last_val_loss": rounds[-1]["val_loss"] if rounds else None,
    }))
PY
