#!/bin/sh
# Installs the interop test's pinned web-push and http_ece
# (notifier/push/testdata/npm/package.json, package-lock.json) with npm ci
# into notifier/push/testdata/npm/node_modules, Node.js first if npm is
# missing. The test runs this when either is missing or not the pinned
# version; it fails (it never skips) when they cannot be installed.
set -eu
cd "$(dirname "$0")"
if ! command -v npm >/dev/null 2>&1; then
	sh ../../../../contracts/typescript/scripts/install-node.sh
fi
npm ci --no-audit --no-fund --loglevel=error
