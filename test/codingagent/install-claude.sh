#!/bin/sh
# Installs the hook tests' pinned coding agent CLIs, Claude Code and Codex
# (test/codingagent/package.json, package-lock.json), with npm ci into
# test/codingagent/node_modules, Node.js first if it is missing. The tests
# run this when either is missing or not the pinned version; they fail
# (they never skip) when it cannot be installed.
set -eu
cd "$(dirname "$0")"
if ! command -v npm >/dev/null 2>&1; then
	sh ../../contracts/typescript/scripts/install-node.sh
fi
npm ci --no-audit --no-fund --loglevel=error
