#!/usr/bin/env bash
# The emulated-home-links figure (issue 15): the same run of NODES nodes,
# each in its own network namespace behind a link of UP Mbit/s up, DOWN
# Mbit/s down and RTT ms round trip (`murmur testnet --home-links`; tbf caps,
# latency injected in the application), with time-budgeted rounds of
# BUDGET seconds — once with blocking rounds, once overlapped, and (with
# SLOW=K:V) once overlapped with the last K nodes computing at speed V.
# Prints one JSON line: per run and node the fraction of wall time in inner
# steps (between its first and last round report), tokens, rounds
# contributed, MB up/down and round times, and whether every round ended
# with all nodes on one StateId. Exits 1 when a run fails, when the
# overlapped run's nodes disagree in any round, or when its least busy node
# spent no more of its time in inner steps than the blocking run's busiest.
#
# Usage: scripts/home-links.sh [nodes=4] [rounds=10] [preset=small] [links=20:50:40] [budget=60]
#        [inner_steps=1000] [batch=1] [slow=]          (slow: K:V, e.g. 1:0.25)
# Needs root and iproute2. Builds the release binaries first
# (MURMUR_TESTNET_NO_BUILD=1 skips that); MURMUR_HOME_LINKS_RUNS picks the
# runs (default "blocking overlapped", plus "slow" when SLOW is given);
# MURMUR_HOME_LINKS_ARGS adds testnet arguments to every run (e.g.
# "--committee-size 1" for one owner per shard).
set -euo pipefail
cd "$(dirname "$0")/.."
NODES="${1:-4}"; ROUNDS="${2:-10}"; PRESET="${3:-small}"; LINKS="${4:-20:50:40}"; BUDGET="${5:-60}"
H="${6:-1000}"; BATCH="${7:-1}"; SLOW="${8:-}"
target="${CARGO_TARGET_DIR:-target}"
if [ "${MURMUR_TESTNET_NO_BUILD:-0}" != "1" ]; then
  cargo build --release --workspace --bins
fi
runs="${MURMUR_HOME_LINKS_RUNS:-blocking overlapped${SLOW:+ slow}}"
# The round deadline: the budget plus room for the slowest exchange.
DEADLINE=$(python3 -c "import math; print(max(30, math.ceil(3 * float('$BUDGET')) + 30))")
D=$(mktemp -d); trap 'rm -rf "$D"' EXIT   # MURMUR_HOME_LINKS_KEEP=1 keeps it
[ "${MURMUR_HOME_LINKS_KEEP:-0}" = "1" ] && trap - EXIT && echo "home-links: logs in $D" >&2
read -r -a extra <<< "${MURMUR_HOME_LINKS_ARGS:-}"
run() { # name, extra testnet arguments…
  local name="$1"; shift
  local t0=$SECONDS
  if ! "$target/release/murmur" testnet --nodes "$NODES" --rounds "$ROUNDS" --preset "$PRESET" \
      --inner-steps "$H" --batch "$BATCH" --inner-budget "$BUDGET" --deadline "$DEADLINE" \
      --eval-every 0 --data synthetic --home-links "$LINKS" --threads-per-node 1 \
      --dir "$D/$name" "${extra[@]}" "$@" >"$D/$name.out" 2>"$D/$name.err"; then
    echo "home-links: the $name run failed:" >&2; tail -n 30 "$D/$name.out" "$D/$name.err" >&2; exit 1
  fi
  echo "$name $((SECONDS - t0))" >>"$D/secs"
}
for r in $runs; do
  case "$r" in
    blocking) run blocking ;;
    overlapped) run overlapped --overlap ;;
    slow) run slow --overlap --slow "$SLOW" ;;
    *) echo "home-links: unknown run '$r'" >&2; exit 2 ;;
  esac
done
python3 - "$D" "$NODES" "$ROUNDS" "$PRESET" "$LINKS" "$BUDGET" "$SLOW" $runs <<'PY'
import json, re, sys, os
d, nodes, rounds, preset, links, budget, slow, *runs = sys.argv[1:]
nodes, rounds = int(nodes), int(rounds)
secs = dict(l.split() for l in open(os.path.join(d, "secs")))
out = {"figure": "home-links", "nodes": nodes, "rounds": rounds, "preset": preset, "links": links,
       "budget_secs": float(budget), "slow": slow or None, "runs": {}}
usage = re.compile(r"^usage (\S+): in inner steps ([0-9.]+)% \(rounds (\d+)\.\.=(\d+)\), tokens (\d+), "
                   r"contributed (\d+)/(\d+) rounds, MB up ([0-9.]+) down ([0-9.]+), "
                   r"round time (?:mean ([0-9.]+) s max ([0-9.]+) s|-)$", re.M)
for name in runs:
    text = open(os.path.join(d, name + ".out")).read()
    if not re.search(r"^done: all \d+ surviving nodes are on state", text, re.M):
        sys.exit(f"home-links: the {name} run's nodes did not end on one state:\n{text[-3000:]}")
    per = {}
    for m in usage.finditer(text):
        per[m.group(1)] = {
            "train_frac": float(m.group(2)) / 100, "rounds": [int(m.group(3)), int(m.group(4))],
            "tokens": int(m.group(5)), "contributed": int(m.group(6)), "reported": int(m.group(7)),
            "mb_up": float(m.group(8)), "mb_down": float(m.group(9)),
            "round_secs_mean": float(m.group(10)) if m.group(10) else None,
            "round_secs_max": float(m.group(11)) if m.group(11) else None,
        }
    if len(per) != nodes:
        sys.exit(f"home-links: the {name} run reported usage for {len(per)} of {nodes} nodes:\n{text[-3000:]}")
    # Each node's StateId per round, from its own log (the supervisor's
    # round lines may be printed before slow nodes report).
    states = {}
    for n in range(1, nodes + 1):
        for l in open(os.path.join(d, name, "logs", f"node-{n}.log")):
            try:
                v = json.loads(l)
            except ValueError:
                continue
            if v.get("event") == "round" and "state_id" in v:
                states.setdefault(v["round"], {})[n] = v["state_id"]
    full = [r for r in sorted(states) if len(states[r]) == nodes]
    out["runs"][name] = {
        "secs": int(secs[name]),
        "nodes": per,
        "one_state_every_round": bool(full) and all(len(set(states[r].values())) == 1 for r in full)
        and full == list(range(len(full))) and len(full) > rounds,
        "rounds_reported": len(full),
        "min_train_frac": min(v["train_frac"] for v in per.values()),
        "max_train_frac": max(v["train_frac"] for v in per.values()),
    }
print(json.dumps(out))
r = out["runs"]
if "overlapped" in r:
    if not r["overlapped"]["one_state_every_round"]:
        sys.exit("home-links: the overlapped run's nodes were not on one StateId after every round")
    if "blocking" in r and r["overlapped"]["min_train_frac"] <= r["blocking"]["max_train_frac"]:
        sys.exit("home-links: overlapped rounds did not spend more of the time in inner steps than blocking ones")
PY
