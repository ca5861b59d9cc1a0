#!/usr/bin/env bash
# A fresh clone's path to a first report and to a webhook-triggered report, following only the
# README, timed:
#
#     benchmarks/fresh_clone.sh [REPOSITORY]      (default: this checkout's committed HEAD)
#
# Clones into a temporary directory, installs as the README's Install block says
# (python3 -m venv .venv && .venv/bin/pip install .), runs `opsagent demo`, then runs the README's
# service block (on a free port instead of 8080) and polls the incident until its report is stored.
# A fresh data directory stands for a new user's (XDG_DATA_HOME). Prints the seconds of each step.
set -euo pipefail
repo=${1:-$(git -C "$(dirname "$0")/.." rev-parse --show-toplevel)}
work=$(mktemp -d)
export XDG_DATA_HOME=$work/data
trap 'kill "${server:-}" 2>/dev/null || true; rm -rf "$work"' EXIT
now() { date +%s.%N; }
t0=$(now)
git clone -q "$repo" "$work/opsagent" && cd "$work/opsagent"
echo "commit $(git rev-parse --short HEAD)"
t1=$(now)
python3 -m venv .venv && .venv/bin/pip install -q . >"$work/pip.log" 2>&1
t2=$(now)
.venv/bin/opsagent demo >"$work/demo.txt"
t3=$(now)
head -8 "$work/demo.txt" | grep -E "^(CONFIRMED|PROBABLE|INCONCLUSIVE)|Do first" || true
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
export PATH="$PWD/.venv/bin:$PATH"
OPSAGENT_WEBHOOK_TOKEN=$(openssl rand -hex 24)
export OPSAGENT_WEBHOOK_TOKEN
opsagent serve --fixtures fixtures/incidents --port "$port" >"$work/serve.log" 2>&1 &
server=$!
until curl -sf "http://127.0.0.1:$port/healthz" >/dev/null; do sleep 0.5; done
t4=$(now)
answer=$(curl -sS "http://127.0.0.1:$port/webhook/alertmanager" \
  -H "Authorization: Bearer $OPSAGENT_WEBHOOK_TOKEN" -H 'Content-Type: application/json' \
  -d '{"version": "4", "groupKey": "{}:{alertname=\"OrderServiceHighLatency\"}", "status": "firing",
       "receiver": "opsagent", "groupLabels": {}, "commonLabels": {}, "commonAnnotations": {},
       "externalURL": "http://alertmanager:9093",
       "alerts": [{"status": "firing", "startsAt": "2026-03-17T14:05:21Z",
                   "labels": {"alertname": "OrderServiceHighLatency", "service": "order-service"},
                   "annotations": {"summary": "order-service p99 latency 2.25s"}}]}')
id=$(python3 -c 'import json, sys; print(json.loads(sys.argv[1])["incident_id"])' "$answer")
report() { curl -sf -H "Authorization: Bearer $OPSAGENT_WEBHOOK_TOKEN" "http://127.0.0.1:$port/incidents/$id"; }
until report | python3 -c 'import json, sys; sys.exit(0 if json.load(sys.stdin)["report"] else 1)'; do sleep 0.5; done
t5=$(now)
report | python3 -c 'import json, sys; r = json.load(sys.stdin)["report"]; c = r["root_cause"] or {}; print("webhook report:", r["status"], c.get("component"), c.get("kind"))'
secs() { python3 -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.1f}')" "$1" "$2"; }
echo "clone $(secs "$t0" "$t1") s · install $(secs "$t1" "$t2") s · demo $(secs "$t2" "$t3") s · clone to first report $(secs "$t0" "$t3") s"
echo "serve until healthy $(secs "$t3" "$t4") s · notification to stored report $(secs "$t4" "$t5") s · clone to webhook-triggered report $(secs "$t0" "$t5") s"
uptime
