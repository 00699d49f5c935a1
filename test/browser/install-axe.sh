#!/bin/sh
# Installs the browser tests' pinned axe-core (test/browser/package.json,
# package-lock.json) with npm ci into test/browser/node_modules. The browser
# tests run this when axe-core is missing or not the pinned version; they
# fail (they never skip) when it cannot be installed.
set -eu
cd "$(dirname "$0")"
if ! command -v npm >/dev/null 2>&1; then
	echo "install-axe: npm is missing: install Debian's 'nodejs' and 'npm' packages (sh contracts/typescript/scripts/install-node.sh does)" >&2
	exit 1
fi
npm ci --no-audit --no-fund --loglevel=error
