#!/usr/bin/env bash
# install-sqs.sh: installs the local SQS-compatible server that the sqs queue
# backend's contract tests (internal/queue/sqs) start, and that a development
# stack can run: local-aws-sqs from the npm registry, an SQS emulator owed did
# not write, which speaks the AWS JSON protocol (X-Amz-Target: AmazonSQS.*)
# that aws-sdk-go-v2's SQS client sends. (goaws v0.4.4 and v0.4.5, the
# releases the Go module proxy serves, speak only the older query protocol.)
#
# It installs, idempotently:
#   $PREFIX/lib/owed-sqs/            the npm package and a launcher, serve.cjs
#   $PREFIX/bin/owed-sqs-server      the command the tests look for on PATH
# PREFIX is $OWED_SQS_PREFIX, default /usr/local. Node.js comes from Debian's
# packages when missing (root needed for that and for the default PREFIX).
#
# owed-sqs-server [--host 127.0.0.1] [--port 0] binds a loopback address only
# (port 0 picks a free one), keeps everything in memory, and prints
# "listening http://HOST:PORT" once it accepts connections.
set -euo pipefail

VERSION=2.0.2
PREFIX=${OWED_SQS_PREFIX:-/usr/local}
DIR=$PREFIX/lib/owed-sqs
BIN=$PREFIX/bin/owed-sqs-server

if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  if [ "$(id -u)" != 0 ]; then
    echo "install-sqs.sh: node and npm are missing; run as root or: sudo apt-get install nodejs npm" >&2
    exit 1
  fi
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nodejs npm >/dev/null
fi
major=$(node -p 'process.versions.node.split(".")[0]')
if [ "$major" -lt 18 ]; then
  echo "install-sqs.sh: local-aws-sqs needs Node.js 18 or later, found $(node --version)" >&2
  exit 1
fi

launcher() {
  cat <<'EOF'
// owed-sqs-server: runs local-aws-sqs on a loopback address. Written by
// owed's scripts/install-sqs.sh; edit that script, not this file.
"use strict";
const { createSqsServer } = require("local-aws-sqs");

const args = process.argv.slice(2);
function arg(name, fallback) {
  const i = args.indexOf(name);
  return i >= 0 && i + 1 < args.length ? args[i + 1] : fallback;
}
const host = arg("--host", "127.0.0.1");
const port = Number(arg("--port", "0"));
if (!/^127\.\d+\.\d+\.\d+$/.test(host) && host !== "::1") {
  console.error(`owed-sqs-server: --host ${host} is not a loopback address; this server has no authentication`);
  process.exit(2);
}
if (!Number.isInteger(port) || port < 0 || port > 65535) {
  console.error(`owed-sqs-server: --port ${arg("--port")} is not a port`);
  process.exit(2);
}
for (const sig of ["SIGINT", "SIGTERM"]) process.on(sig, () => process.exit(0));
createSqsServer({
  port,
  hostname: host,
  // A test deletes and recreates nothing; AWS's 60 s wait before reusing a
  // deleted queue's name would only slow a development stack.
  emulateQueueCreationLifecycle: false,
}).then((server) => {
  const url = host.includes(":") ? `http://[${host}]:${server.address().port}` : `http://${host}:${server.address().port}`;
  console.log(`listening ${url}`);
}, (err) => {
  console.error(`owed-sqs-server: ${err && err.message ? err.message : err}`);
  process.exit(1);
});
EOF
}

# Without root the default PREFIX is not writable: say so before npm fails
# with a permission error, and name a PREFIX that works.
probe=$PREFIX
while [ ! -e "$probe" ]; do probe=$(dirname "$probe"); done
if [ ! -w "$probe" ]; then
  echo "install-sqs.sh: cannot write $PREFIX: run as root (sudo $0), or without root: OWED_SQS_PREFIX=\$HOME/.local $0 (then put ~/.local/bin on PATH)" >&2
  exit 1
fi

installed=$(node -p "try { require('$DIR/node_modules/local-aws-sqs/package.json').version } catch { '' }" 2>/dev/null || true)
if [ "$installed" != "$VERSION" ]; then
  mkdir -p "$DIR"
  # --ignore-scripts: nothing from the registry runs at install time.
  npm install --prefix "$DIR" --no-audit --no-fund --omit=dev --ignore-scripts --loglevel=error \
    "local-aws-sqs@$VERSION" >/dev/null
fi
if ! launcher | cmp -s - "$DIR/serve.cjs" 2>/dev/null; then
  launcher >"$DIR/serve.cjs"
fi
wrapper=$(printf '#!/bin/sh\nexec node %s/serve.cjs "$@"\n' "$DIR")
if [ "$(cat "$BIN" 2>/dev/null || true)" != "$wrapper" ]; then
  mkdir -p "$(dirname "$BIN")"
  printf '%s\n' "$wrapper" >"$BIN"
  chmod 755 "$BIN"
fi
echo "install-sqs.sh: $BIN runs local-aws-sqs $VERSION"
