#!/usr/bin/env bash
# Installs the pinned official MCP peers the CLI's tests drive: the Python SDK (client
# side) and two reference servers from npm for host/cli/tests/all/wrap_peers.rs, and the
# official conformance suite with the Node 22 it needs (npm's `node` package brings
# the binary, as npm/node_modules/.bin/node) for host/cli/tests/all/gateway.rs.
# Usage: install.sh [PREFIX]   (default: $CARGO_TARGET_DIR or target, then /mcp-peers)
# Idempotent: a stamp naming the pins marks a finished install. Test binaries running
# at once serialise on a lock, so only the first one installs.
set -euo pipefail

PY_PIN="mcp==2.3.0"
NPM_PINS=(
  "@modelcontextprotocol/server-everything@2026.8.31"
  "@modelcontextprotocol/server-filesystem@2026.8.31"
  "@modelcontextprotocol/conformance@0.1.16"
  "node@22.23.3"
)
STAMP_TEXT="$PY_PIN ${NPM_PINS[*]}"

root="$(cd "$(dirname "$0")/../.." && pwd)"
prefix="${1:-${CARGO_TARGET_DIR:-$root/target}/mcp-peers}"
mkdir -p "$prefix"
prefix="$(cd "$prefix" && pwd)"

exec 9>"$prefix/.lock"
flock 9

if [[ -f "$prefix/stamp" && "$(cat "$prefix/stamp")" == "$STAMP_TEXT" ]]; then
  exit 0
fi

for tool in python3 node npm; do
  if ! command -v "$tool" >/dev/null; then
    echo "mcp peers: $tool is required (the peers are a Python SDK and Node servers)" >&2
    exit 1
  fi
done

# A half-finished or older install is removed, never patched.
rm -rf "$prefix/stamp" "$prefix/py" "$prefix/npm"
echo "mcp peers: installing $STAMP_TEXT into $prefix" >&2
if ! python3 -m pip install --quiet --disable-pip-version-check --no-input \
  --target "$prefix/py" "$PY_PIN" >&2; then
  echo "mcp peers: could not install the Python SDK $PY_PIN" >&2
  exit 1
fi
if ! npm install --silent --no-audit --no-fund --prefix "$prefix/npm" "${NPM_PINS[@]}" >&2; then
  echo "mcp peers: could not install ${NPM_PINS[*]}" >&2
  exit 1
fi
printf '%s' "$STAMP_TEXT" >"$prefix/stamp"
