// The HTTP API's OpenAPI document (services/api/openapi.json, served at
// /openapi.json) is checked the way its users consume it: validated against
// the OpenAPI 3.1 specification, linted with Redocly's strict rules, and
// turned into TypeScript types with openapi-typescript that a small client
// of the API must compile against with tsc --strict.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { promisify } from 'node:util';
import { compileErrors, validate } from '@readme/openapi-parser';
import { createConfig, lint } from '@redocly/openapi-core';
import openapiTS, { astToString } from 'openapi-typescript';
import type { OpenAPIV3_1 } from 'openapi-types';
import { pkgDir } from './harness.js';

const documentPath = path.resolve(pkgDir, '../../services/api/openapi.json');

async function readDocument(): Promise<Record<string, any>> {
  return JSON.parse(await readFile(documentPath, 'utf8'));
}

/** The document's problems as the OpenAPI 3.1 schema and its rules see them; empty when valid. */
async function specProblems(doc: Record<string, any>): Promise<string> {
  // validate dereferences the document in place: give it a copy.
  const result = await validate(structuredClone(doc) as OpenAPIV3_1.Document);
  return result.valid ? '' : compileErrors(result);
}

/** Redocly's recommended-strict rules, where every warning is an error. */
async function lintProblems(file: string): Promise<string[]> {
  const config = await createConfig({
    extends: ['recommended-strict'],
    rules: {
      // Liveness, readiness, metrics and the public documents answer no 4xx.
      'operation-4xx-response': 'off',
      // Every operation's tags are declared, so generators group by them.
      'operation-tag-defined': 'error',
      'no-unused-components': 'error',
    },
  });
  const problems = await lint({ ref: file, config });
  return problems.map((p) => `${p.severity} ${p.ruleId}: ${p.message} at ${p.location[0]?.pointer ?? '?'}`);
}

/** A copy of the document with the record of every approval answer pointing nowhere. */
function withBrokenRef(doc: Record<string, any>): Record<string, any> {
  const broken = structuredClone(doc);
  broken.components.schemas.RecordAnswer.properties.record.$ref = '#/components/schemas/NoSuchRecord';
  return broken;
}

test('the OpenAPI document is valid OpenAPI 3.1', async () => {
  const doc = await readDocument();
  assert.equal(doc.openapi, '3.1.0');
  assert.equal(await specProblems(doc), '');
});

test('the OpenAPI document passes Redocly lint (recommended-strict)', async () => {
  assert.deepEqual(await lintProblems(documentPath), []);
});

test('a document with a broken $ref fails validation and lint', async (t) => {
  const dir = await mkdtemp(path.join(tmpdir(), 'countersign-openapi-'));
  t.after(() => rm(dir, { recursive: true, force: true }));
  const broken = withBrokenRef(await readDocument());
  assert.notEqual(await specProblems(broken), '');
  const file = path.join(dir, 'openapi.json');
  await writeFile(file, JSON.stringify(broken));
  const problems = await lintProblems(file);
  assert.ok(
    problems.some((p) => p.includes('no-unresolved-refs')),
    `lint of the broken document: ${problems.join('\n')}`,
  );
});

// A client of the API written against the generated types. Each line
// compiles only if the document types it well: a free-form object that a
// generator turned into an object with no keys, a record that is not the
// contract's, or an error code that is any string fails the build.
const client = `
import type { components, operations, paths } from './api.js';
import type { ApprovalRecord as ContractRecord } from ${JSON.stringify(path.join(pkgDir, 'src/schema.gen.js'))};

type Schemas = components['schemas'];
type Equal<A, B> = (<T>() => T extends A ? 1 : 2) extends <T>() => T extends B ? 1 : 2 ? true : false;
function expectType<T extends true>(): T | undefined {
  return undefined;
}

// POST /v1/reviews: free-form arguments, labels and tool schema.
type ReviewRequest = paths['/v1/reviews']['post']['requestBody']['content']['application/json'];
export const review: ReviewRequest = {
  run: { agent: 'billing-agent', id: 'run-1', requested_by: 'carol', labels: { env: 'prod' } },
  tool_calls: [
    {
      id: 'call-1',
      name: 'payments.send',
      arguments: { amount: 1250, recipient: 'Globex GmbH', lines: [{ sku: 'a-1', qty: 2 }] },
      tool_schema: { type: 'object', properties: { amount: { type: 'number' } }, required: ['amount'] },
    },
  ],
};
type ReviewResult = operations['createReview']['responses'][200]['content']['application/json']['results'][number];
export function runWith(r: ReviewResult): Record<string, unknown> | undefined {
  return r.verdict === 'allowed' ? r.arguments : undefined;
}

// GET /v1/approvals/{event_id}: the record is the contract's record.
type ApprovalAnswer = paths['/v1/approvals/{event_id}']['get']['responses'][200]['content']['application/json'];
type Status = 'pending' | 'approved' | 'rejected' | 'responded' | 'answered' | 'expired' | 'cancelled';
export function describe(answer: ApprovalAnswer): string {
  const status: Status = answer.record.status;
  const revision: number = answer.revision;
  const agent: string = answer.record.request.run.agent;
  const approvedArguments: Record<string, unknown> | undefined = answer.record.outcome?.arguments;
  const firstChange: 'add' | 'remove' | 'replace' | 'move' | 'copy' | 'test' | undefined =
    answer.record.outcome?.diff?.[0]?.op;
  const voter: string | undefined = answer.record.votes[0]?.approver.id;
  const refusal: Schemas['RefusalReason'] | undefined = answer.record.refused_votes[0]?.reason;
  const asContract: ContractRecord['status'] = answer.record.status;
  return [status, revision, agent, JSON.stringify(approvedArguments), firstChange, voter, refusal, asContract].join(' ');
}
expectType<Equal<ApprovalAnswer['record']['status'], Status>>();
expectType<Equal<ApprovalAnswer['record']['status'], ContractRecord['status']>>();
expectType<Equal<Schemas['RecordAnswer']['record'], Schemas['ApprovalRecord']>>();

// Listings and vote answers carry the same record.
type Listing = operations['listApprovals']['responses'][200]['content']['application/json'];
expectType<Equal<Listing['items'][number]['record'], Schemas['ApprovalRecord']>>();
type Counted = operations['vote']['responses'][200]['content']['application/json'];
expectType<Equal<Counted['record'], Schemas['ApprovalRecord']>>();

// POST /v1/approvals/{event_id}/votes: an answer's free-form content, an
// edit's free-form arguments.
type VoteRequest = paths['/v1/approvals/{event_id}/votes']['post']['requestBody']['content']['application/json'];
export const answer: VoteRequest = { decision: 'answer', answer: { action: 'accept', content: { city: 'Paris', nights: 3 } } };
export const edit: VoteRequest = { decision: 'edit', arguments: { amount: 1000, recipient: 'Globex GmbH' } };

// Errors: code is a closed union of the API's codes.
type ErrorCode = Schemas['Error']['error']['code'];
export const tooLarge: ErrorCode = 'too_large';
type VoteConflict = operations['vote']['responses'][409]['content']['application/json'];
export const outOfOrder: VoteConflict = { error: { code: 'out_of_order', message: 'not your turn yet' } };
expectType<Equal<string extends ErrorCode ? true : false, false>>();
// @ts-expect-error: not a code of the API.
export const unknownCode: ErrorCode = 'no_such_code';

// A question's schema and answer are free-form objects.
type QuestionRequest = operations['askQuestion']['requestBody']['content']['application/json'];
export const question: QuestionRequest = {
  run: { agent: 'travel-agent' },
  question: { text: 'Which city?', schema: { type: 'object', properties: { city: { type: 'string' } } } },
};
type QuestionAnswer = operations['askQuestion']['responses'][200]['content']['application/json'];
export function city(a: QuestionAnswer): unknown {
  return a.answer?.content?.['city'];
}

// The timeline's entries are the contract's messages.
type Timeline = operations['getTimeline']['responses'][200]['content']['application/json'];
export function specs(t: Timeline): string[] {
  return t.events.map((e) => e.data.spec);
}
`;

test('types generated from the document by openapi-typescript compile with a client of the API (tsc --strict)', async (t) => {
  const dir = await mkdtemp(path.join(tmpdir(), 'countersign-openapi-ts-'));
  t.after(() => rm(dir, { recursive: true, force: true }));
  const generated = astToString(await openapiTS(pathToFileURL(documentPath)));
  await writeFile(path.join(dir, 'api.ts'), generated);
  await writeFile(path.join(dir, 'client.ts'), client);
  await writeFile(path.join(dir, 'package.json'), JSON.stringify({ type: 'module' }));
  const tsc = path.join(pkgDir, 'node_modules/typescript/bin/tsc');
  const args = [
    tsc, '--noEmit', '--strict', '--noUncheckedIndexedAccess', '--skipLibCheck', 'false',
    '--target', 'ES2022', '--module', 'NodeNext', '--moduleResolution', 'NodeNext',
    'api.ts', 'client.ts',
  ];
  try {
    await promisify(execFile)(process.execPath, args, { cwd: dir });
  } catch (err) {
    const e = err as { stdout?: string; stderr?: string };
    assert.fail(`tsc refused the generated types or their client:\n${e.stdout ?? ''}${e.stderr ?? ''}`);
  }
});
