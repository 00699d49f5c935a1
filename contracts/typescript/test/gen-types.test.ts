import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFile } from 'node:fs/promises';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { pkgDir } from './harness.js';

test('src/schema.gen.ts is what the generator makes from contracts/schema (run npm run gen:types)', async () => {
  const { generate } = await import(pathToFileURL(path.join(pkgDir, 'scripts/gen-types.mjs')).href);
  const fresh: string = await generate();
  const committed = await readFile(path.join(pkgDir, 'src/schema.gen.ts'), 'utf8');
  assert.equal(committed, fresh);
  assert.match(fresh, /export interface ApprovalRecord \{/);
  assert.match(fresh, /export interface ApprovalDecided \{/);
});
