#!/usr/bin/env bash
# Runs the router locally with everything it needs: a local Topology
# Service (127.0.0.1:9096) and three demo cells (127.0.0.1:9101-9103; cell 1
# is the legacy cell) from devstack/topology.toml, and the router under
# `wrangler dev --env dev` on 127.0.0.1:8787. Ctrl-C stops all of it.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/node-env.sh

bash scripts/setup.sh
bash scripts/build-worker.sh
cargo build --quiet -p devstack

export WRANGLER_SEND_METRICS=false CLOUDFLARE_CF_FETCH_ENABLED=false

stack_out=$(mktemp)
target/debug/devstack up --config devstack/topology.toml > "$stack_out" &
stack_pid=$!
cleanup() {
  kill "$stack_pid" 2>/dev/null || true
  wait "$stack_pid" 2>/dev/null || true
  rm -f "$stack_out"
}
trap cleanup EXIT INT TERM

for _ in $(seq 50); do
  grep -q '"ready":"topology"' "$stack_out" 2>/dev/null && break
  kill -0 "$stack_pid" 2>/dev/null || { echo "devstack failed to start (ports 9096/9101-9103 busy?)" >&2; exit 1; }
  sleep 0.1
done
cat "$stack_out"

# [env.dev.vars] GITLAB_CELLS must list the cells devstack just started.
cells=$(target/debug/devstack cells --config devstack/topology.toml)
node --input-type=module -e '
  const { readWranglerConfig } = await import("./scripts/deploy/wrangler-config.mjs");
  const shipped = JSON.parse(readWranglerConfig("wrangler.toml").environment("dev").vars.GITLAB_CELLS ?? "[]");
  const wanted = JSON.parse(process.argv[1]);
  const key = (l) => JSON.stringify(l.map((c) => [c.id, c.address, c.registry_address, c.session_prefix, c.health_path]));
  if (key(shipped) !== key(wanted)) console.error("warning: [env.dev.vars] GITLAB_CELLS differs from devstack/topology.toml; want:\n" + process.argv[1]);
' "$cells" || true

# The control document exists from the start (docs/operations.md: without
# it a new isolate does not use the Cache API); `reset` keeps what is there,
# and a new local store starts at generation 0.
cargo run -q --bin rulesctl -- control set --env dev --local --start-generation 0 reset > /dev/null || echo "warning: could not write the local control document" >&2

token=$(cargo run -q --bin rulesctl -- token --cell 2 2>/dev/null || true)
cat <<MSG

Local stack is up. The router will listen on http://127.0.0.1:8787 (ruleset cells: [env.dev.vars] in wrangler.toml).
Try:
  curl -s http://127.0.0.1:8787/cell2-group/app              # anonymous, by path: cell 2 owns cell2-group
  curl -s http://127.0.0.1:8787/api/v4/projects/300          # API by project id: cell 3
  curl -s http://127.0.0.1:8787/explore                      # reserved path: legacy cell 1, no service call
  curl -s -H 'Cookie: _gitlab_session=cell-2-0123456789abcdef0123456789abcdef' http://127.0.0.1:8787/dashboard   # cell 2
  git clone http://127.0.0.1:8787/cell2-group/demo.git /tmp/demo   # a real Git repository on cell 2, through the router
  curl -s -X POST -d '{"type":"SESSION_PREFIX","value":"cell-3"}' http://127.0.0.1:9096/v1/classify      # ask the Topology Service
  curl -s http://127.0.0.1:9096/_stats                         # classify calls it received
  curl -si http://127.0.0.1:8787/users/sign_in | grep -i -e set-cookie -e x-demo-cell   # spread over the healthy cells
  curl -s "http://127.0.0.1:8787/__scheduled?cron=*+*+*+*+*"   # run the cell health probe now (its summary is in the log)
  cargo run -q --bin rulesctl -- control set --env dev --local mode=passthrough   # runtime switch: all to cell 1 within 5 s (mode=normal undoes it)
  toolchain/node/node_modules/.bin/node bench/cutover-drill.mjs   # move organization acme between cells 2 and 3: targeted invalidation vs a global purge
${token:+  curl -s -H 'PRIVATE-TOKEN: $token' http://127.0.0.1:8787/api/v4/user   # routable token for cell 2}
Each cell answers with a JSON echo of what it received (cell id, path, headers).
Ctrl-C stops everything.

MSG

node_modules/.bin/wrangler dev --env dev --ip 127.0.0.1 --port 8787 --test-scheduled
