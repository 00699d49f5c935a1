// The package installs from a fresh clone: `npm install <directory>` and
// `npm pack` work on a copy of the package's sources alone (no
// node_modules, no dist), and another project imports what they give.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { cp, mkdir, mkdtemp, readdir, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { pkgDir } from './harness.js';

const exec = promisify(execFile);

// npm's settings of the command that runs the tests would reach the npm
// commands below as npm_config_* variables: only where the cache and
// registry are is kept.
const env = Object.fromEntries(
  Object.entries(process.env).filter(([k]) => !/^npm_/i.test(k) || /^npm_config_(cache|registry|userconfig)$/i.test(k)),
);

function npm(cwd: string, ...args: string[]) {
  return exec('npm', [...args, '--no-audit', '--no-fund'], { cwd, env, maxBuffer: 16 << 20 });
}

let work = '';
before(async () => {
  work = await mkdtemp(path.join(tmpdir(), 'countersign-package-'));
});
after(async () => {
  await rm(work, { recursive: true, force: true });
});

/** A copy of the package as a fresh clone has it: its files in git, nothing installed or built. */
async function freshClone(name: string): Promise<string> {
  const dir = path.join(work, name);
  const { stdout } = await exec('git', ['ls-files', '--cached', '--others', '--exclude-standard', '-z', '.'], { cwd: pkgDir, maxBuffer: 16 << 20 });
  for (const f of stdout.split('\0').filter(Boolean)) {
    await mkdir(path.dirname(path.join(dir, f)), { recursive: true });
    await cp(path.join(pkgDir, f), path.join(dir, f));
  }
  const entries = await readdir(dir);
  assert.ok(!entries.includes('node_modules') && !entries.includes('dist'), `a fresh clone has neither node_modules nor dist: ${entries}`);
  return dir;
}

/** A project that depends on the package, installed with `npm install <spec>`. */
async function project(name: string, spec: string): Promise<string> {
  const dir = path.join(work, name);
  await mkdir(dir, { recursive: true });
  await writeFile(path.join(dir, 'package.json'), JSON.stringify({ name, version: '1.0.0', private: true, type: 'module' }));
  await npm(dir, 'install', '--prefer-offline', spec);
  return dir;
}

/** Imports the package's entry points in the project, as its code would, and names what they export. */
async function imports(dir: string): Promise<string> {
  const script = `
    const main = await import('@countersign/client');
    const receipts = await import('@countersign/client/receipts');
    const cs = new main.Countersign({ url: 'http://127.0.0.1:1', token: 't', agent: 'a' });
    console.log([typeof cs.run, typeof main.receiptHeaders, typeof receipts.verifyReceipt, typeof receipts.serverReplayStore].join(' '));
  `;
  const { stdout } = await exec(process.execPath, ['--input-type=module', '-e', script], { cwd: dir, env });
  return stdout.trim();
}

test('npm install <directory> of a fresh clone builds the package, and a project imports it', async () => {
  const clone = await freshClone('clone-install');
  const app = await project('app-install', clone);
  assert.equal(await imports(app), 'function function function function');
});

test('npm pack in a fresh clone builds the package; the tarball installs and imports', async () => {
  const clone = await freshClone('clone-pack');
  const { stdout } = await npm(clone, 'pack', '--json', '--pack-destination', work);
  const [packed] = JSON.parse(stdout.slice(stdout.search(/^\[/m))) as Array<{ filename: string; files: Array<{ path: string }> }>;
  const files = packed!.files.map((f) => f.path);
  for (const f of ['dist/index.js', 'dist/index.d.ts', 'dist/receipts.js', 'dist/ai-sdk.js', 'dist/langgraph.js', 'dist/openai-agents.js', 'dist/adk.js', 'dist/mastra.js', 'README.md']) {
    assert.ok(files.includes(f), `the tarball holds ${f}`);
  }
  assert.ok(!files.some((f) => f.startsWith('test/') || f.startsWith('node_modules/')), 'no tests or dependencies in the tarball');
  const app = await project('app-pack', path.join(work, packed!.filename));
  assert.equal(await imports(app), 'function function function function');
});
