// Builds dist/ with the package's own TypeScript: npm runs it as `prepare`
// on `npm ci` and `npm install` in this directory, before `npm pack` and
// `npm publish`, and when another project installs this directory
// (`npm install /path/to/contracts/typescript`, linked or with
// --install-links). In a fresh clone, where the devDependencies are not
// installed yet, it installs them first (`npm ci`, from the lockfile, from
// npm's cache when it holds them) — whatever the installing project's own
// flags (--omit=dev, --global) say.
import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const pkgDir = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const tsc = path.join(pkgDir, 'node_modules', 'typescript', 'bin', 'tsc');

function run(cmd, args, env = process.env) {
  const r = spawnSync(cmd, args, { cwd: pkgDir, stdio: 'inherit', env });
  if (r.error) throw r.error;
  if (r.status !== 0) {
    console.error(`prepare: ${path.basename(cmd)} ${args.join(' ')} failed (${r.status ?? r.signal})`);
    process.exit(r.status ?? 1);
  }
}

if (!existsSync(tsc)) {
  console.error('prepare: installing the devDependencies to build dist/ (npm ci)');
  // The installing command's settings reach a lifecycle script as
  // npm_config_* variables; those that would change what this install
  // does are left out.
  const env = Object.fromEntries(
    Object.entries(process.env).filter(
      ([k]) => !/^npm_config_(omit|include|production|only|global|location|prefix|install_links|dry_run|ignore_scripts|save.*|workspaces?|package_lock(_only)?|lockfile_version|before|audit|fund)$/i.test(k),
    ),
  );
  const npm = process.env.npm_execpath;
  const [cmd, pre] = npm && npm.endsWith('.js') ? [process.execPath, [npm]] : ['npm', []];
  run(cmd, [...pre, 'ci', '--include=dev', '--ignore-scripts', '--prefer-offline', '--no-audit', '--no-fund'], env);
}
run(process.execPath, [tsc, '-p', 'tsconfig.json']);
