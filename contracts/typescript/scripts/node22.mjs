// Runs node with the arguments given, on Node 22: the tests of the adapters
// whose framework needs it (Mastra declares Node >= 22.13) run so under
// `npm test` whatever Node runs npm. The binary is npm's platform package of
// the official Node release, pinned in scripts/node22/package.json and its
// lockfile and installed there (`npm ci`, from npm's cache when it holds
// it) the first time.
import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const dir = path.join(path.dirname(fileURLToPath(import.meta.url)), 'node22');
const pkg = `node-${process.platform}-${process.arch}`;
const bin = path.join(dir, 'node_modules', pkg, 'bin', 'node');

if (!existsSync(bin)) {
  console.error(`node22: installing ${pkg} into ${path.relative(process.cwd(), dir)} (npm ci)`);
  const npm = process.env.npm_execpath;
  const [cmd, pre] = npm && npm.endsWith('.js') ? [process.execPath, [npm]] : ['npm', []];
  // Only where npm's cache and registry are is kept of the calling npm's settings.
  const env = Object.fromEntries(Object.entries(process.env).filter(([k]) => !/^npm_/i.test(k) || /^npm_config_(cache|registry|userconfig)$/i.test(k)));
  const r = spawnSync(cmd, [...pre, 'ci', '--prefer-offline', '--no-audit', '--no-fund'], { cwd: dir, stdio: 'inherit', env });
  if (r.error) throw r.error;
  if (r.status !== 0) process.exit(r.status ?? 1);
  if (!existsSync(bin)) {
    console.error(`node22: npm has no Node 22 package for ${process.platform}-${process.arch} in ${dir}/package.json; run these tests with a Node 22 of your own`);
    process.exit(1);
  }
}
const r = spawnSync(bin, process.argv.slice(2), { stdio: 'inherit' });
if (r.error) throw r.error;
process.exit(r.status ?? 1);
