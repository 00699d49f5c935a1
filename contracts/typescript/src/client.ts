import { CountersignError, Codes } from './errors.js';
import { parseEvents } from './sse.js';
import { markGuarded, toCall, type AnyToolCall, type Call } from './toolcalls.js';
import {
  terminalStatuses,
  type ApprovalState,
  type Decided,
  type ExecutionOutcome,
  type HumanAnswer,
  type QuestionInput,
  type Result,
  type RunInfo,
  type VoteInput,
} from './types.js';
import type { ApprovalRecord, Run } from './schema.gen.js';

/** The longest wait the API grants one request. */
const maxWaitMs = 60_000;

/** Options of a Countersign client. */
export interface CountersignOptions {
  /** The API's base URL, e.g. http://127.0.0.1:8080 (default: $COUNTERSIGN_URL). */
  url?: string;
  /** A bearer token with the agent role (default: $COUNTERSIGN_TOKEN). */
  token?: string;
  /** The agent's name, used for every run that names none. */
  agent?: string;
  /** The fetch to send requests with (default: the platform's). */
  fetch?: typeof fetch;
  /** How transient failures are retried. */
  retry?: RetryOptions;
  /**
   * The longest time one request of a wait asks the API to hold it (a long
   * poll; default and at most 60 000 ms). A longer wait is a chain of such
   * polls, each re-attaching to the same approvals.
   */
  pollMs?: number;
  /**
   * What an aborted wait does to the approvals it was waiting on (see
   * ReviewOptions.signal). Default: cancel them, spending at most 5 000 ms
   * after the abort. false: leave them pending (as a wait that merely ends
   * does), e.g. when another worker will resume the run.
   */
  cancelOnAbort?: false | CancelOnAbortOptions;
  /**
   * Told when the outcome of a call that ran could not be reported (see
   * run): the tool's own result or error goes on regardless. Default:
   * ignored (run's answer carries it as `outcomeError`).
   */
  onReportError?: (err: unknown, eventId: string) => void;
}

/** How an aborted wait cancels the approvals it was waiting on. */
export interface CancelOnAbortOptions {
  /**
   * How long after the abort the client may spend on it: learning which
   * approvals a request in flight opened, and cancelling them (default
   * 5 000 ms). The abort rejects once that is done or this has passed.
   */
  withinMs?: number;
  /** Told of each approval that could not be cancelled (default: ignored; the abort goes on). */
  onError?: (err: unknown, eventId: string) => void;
}

/**
 * Transient failures — the network, 502, 503, 504, and a claim or vote the
 * arbiter has not applied yet (202) — are retried with exponential backoff
 * and jitter. A request that waits for humans (review or ask with `wait`,
 * waitDecided, run) retries them for as long as it waits: until its `wait`
 * deadline (at least `forMs` after the first failure) or, with `wait: true`,
 * until its signal aborts, so it outlives a restart of the server. Any other
 * request retries them until `forMs` has passed since its first failure.
 * Refusals (4xx) never are retried.
 */
export interface RetryOptions {
  /**
   * How long a request that does not wait for humans keeps retrying,
   * counted from its first failure (default 30 000 ms).
   */
  forMs?: number;
  /** First wait between attempts (default 100 ms); it doubles up to maxBackoffMs. */
  minBackoffMs?: number;
  /** Longest wait between attempts (default 2 000 ms). */
  maxBackoffMs?: number;
}

/** Options of review. */
export interface ReviewOptions {
  /**
   * false (default): answer at once; gated calls not decided yet are
   * `pending`. true: wait until no call is pending (or `signal` aborts). A
   * number: wait at most that many milliseconds; calls still pending then
   * come back `pending` and their approvals stay open for a later wait.
   */
  wait?: boolean | number;
  /**
   * Aborting it is an explicit cancel of the calls: a review that waits
   * cancels the approvals it is waiting on (see
   * CountersignOptions.cancelOnAbort), then rejects with the signal's
   * reason. Only an abort cancels: a wait that ends (its time is up, the
   * process exits) leaves them pending, so the run can resume elsewhere.
   */
  signal?: AbortSignal;
  /**
   * Called once per call as soon as its result is final: allowed and denied
   * calls at once (before anything waits), gated ones as humans decide. An
   * agent runs its allowed calls from here instead of holding them until the
   * last pending call of the batch is decided.
   */
  onResult?: (result: Result, index: number) => void;
}

/** Options of guard. */
export interface GuardOptions<A extends unknown[]> {
  /** The tool's name as the model calls it (default: the tool's `name`). */
  name?: string;
  /** The run of a call, or how to find it from the execute function's arguments. */
  run?: RunInfo | ((...args: A) => RunInfo);
  /**
   * The model's id of the call, from the execute function's arguments. The
   * default finds it where the AI SDK (`options.toolCallId`), the OpenAI
   * Agents SDK (`details.toolCall.callId`) and LangChain (`config.toolCall.id`)
   * put it.
   */
  callId?: (...args: A) => string | undefined;
  /** JSON Schema of the arguments, so a human's edit is checked against it. */
  toolSchema?: Record<string, unknown>;
  /**
   * What the tool returns when the call may not run (default: the result's
   * reason, a message meant for the model).
   */
  onBlocked?: (result: Result) => unknown;
}

/**
 * What run hands the function besides the arguments: how the call was
 * allowed, and its receipt for a tool that verifies receipts.
 */
export interface RunContext {
  /** The review's result for the call (verdict "allowed"). */
  result: Result;
  /**
   * The receipt Countersign signed for this run of the call: the claim's
   * (`record.claim.receipt`) for an approved call, the review's
   * (`result.receipt`) for a call allowed under a standing grant or by a
   * rule with `receipt: true`; undefined for a call allowed without one.
   * It is good for one use: send it with the call (receiptHeaders) to the
   * tool, which verifies it (`@countersign/client/receipts`).
   */
  receipt: string | undefined;
  /** The claimed record, for an approved call. */
  record?: ApprovalRecord;
}

/** Options of decisions. */
export interface DecisionsOptions {
  /**
   * The approvals the caller is waiting on. Each time the stream (re)connects
   * their records are read again and those already decided are yielded, so a
   * decision made while the stream was down is not missed.
   */
  watch?: () => Iterable<string>;
  signal?: AbortSignal;
  /** Bounds of the wait before reconnecting (default 200 ms to 5 000 ms). */
  minBackoffMs?: number;
  maxBackoffMs?: number;
}

/** What run reports. */
export interface RunOutcome<T> {
  result: Result;
  /** Whether the function ran. */
  ran: boolean;
  /** What it returned, when it ran. */
  output?: T;
  /** The receipt the function was given, when it ran (see RunContext). */
  receipt?: string;
  /**
   * Why the call's outcome could not be reported after the function ran
   * (undefined when it was, or when there was no claim to report on).
   */
  outcomeError?: unknown;
}

/** Options of run. */
export interface RunOptions<T> {
  /** The claim's id (default: a fresh one); keep it with the run to retry a claim whose answer was lost. */
  claimId?: string;
  /** Aborting it while run waits for the decision cancels the approval (see review). */
  signal?: AbortSignal;
  /**
   * What the outcome report of a call whose function returned says: a
   * summary for people, the result's SHA-256, and its status, succeeded
   * unless this says failed (a tool that returns its failure, such as an
   * MCP result with isError). Default: succeeded, nothing more. A call
   * whose function threw is reported failed with the error's message.
   */
  summarize?: (output: T) => Partial<ExecutionOutcome>;
  /**
   * false: fn does not run the tool but hands the arguments on to whatever
   * does, and that reports the outcome (report). Default true.
   */
  report?: boolean;
}

/** Options of report. */
export interface ReportOptions {
  /**
   * The report's id (default: a fresh one). The same id again is the same
   * report: keep it with the run to retry a report whose answer was lost.
   */
  commandId?: string;
  signal?: AbortSignal;
}

/** The most bytes of UTF-8 an outcome's summary may hold. */
export const maxSummaryBytes = 1024;

/**
 * summaryText makes text fit an outcome's summary: control characters
 * (other than tab and line breaks) become spaces, and text longer than
 * maxSummaryBytes of UTF-8 is cut on a character boundary.
 */
export function summaryText(text: string): string {
  // A lone surrogate is not UTF-8: toWellFormed's U+FFFD, by hand for Node 20.
  const clean = text
    .replace(/[\u0000-\u0008\u000b\u000c\u000e-\u001f\u007f]/g, ' ')
    .replace(/[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/g, '\ufffd');
  const bytes = new TextEncoder().encode(clean);
  if (bytes.length <= maxSummaryBytes) return clean;
  let n = maxSummaryBytes;
  while (n > 0 && (bytes[n]! & 0xc0) === 0x80) n--;
  return new TextDecoder().decode(bytes.subarray(0, n));
}

/** newReportId returns a fresh id for an outcome report (ReportOptions.commandId). */
export function newReportId(): string {
  return 'outcome-' + globalThis.crypto.randomUUID();
}

/** The HTTP header a tool reads a receipt from (receiptMiddleware, the Go and Python verifiers). */
export const receiptHeader = 'Countersign-Receipt';

/**
 * receiptHeaders returns the headers that carry a receipt to a tool, to
 * spread into a request's headers: `{ 'Countersign-Receipt': receipt }`, or
 * no header when there is no receipt (a tool that requires one then
 * refuses the call with receipt_missing).
 */
export function receiptHeaders(receipt: string | undefined): Record<string, string> {
  return receipt ? { [receiptHeader]: receipt } : {};
}

/** newClaimId returns a fresh claim id. Keep it with the run to retry a claim whose answer was lost. */
export function newClaimId(): string {
  return 'claim-' + globalThis.crypto.randomUUID();
}

function env(name: string): string | undefined {
  const p = (globalThis as { process?: { env?: Record<string, string | undefined> } }).process;
  return p?.env?.[name];
}

function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason);
    const t = setTimeout(() => {
      signal?.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    const onAbort = () => {
      clearTimeout(t);
      reject(signal!.reason);
    };
    signal?.addEventListener('abort', onAbort, { once: true });
  });
}

function waitParam(ms: number, most = maxWaitMs): string {
  return `${Math.max(0, Math.min(ms, most))}ms`;
}

/**
 * A client of Countersign's HTTP API: it gates an agent's tool calls (review
 * → wait → claim → run), asks humans, follows decisions, and decides.
 * Nothing but the platform's fetch; safe to share.
 */
export class Countersign {
  readonly url: string;
  readonly agent: string | undefined;
  readonly #token: string;
  readonly #fetch: typeof fetch;
  readonly #retry: Required<RetryOptions>;
  readonly #pollMs: number;
  readonly #cancelOnAbort: { withinMs: number; onError: (err: unknown, eventId: string) => void } | undefined;
  readonly #onReportError: (err: unknown, eventId: string) => void;

  constructor(options: CountersignOptions = {}) {
    const url = options.url ?? env('COUNTERSIGN_URL');
    const token = options.token ?? env('COUNTERSIGN_TOKEN');
    if (!url) throw new CountersignError(0, Codes.invalidConfig, 'url is required (or set COUNTERSIGN_URL)', 'url');
    let parsed: URL;
    try {
      parsed = new URL(url);
    } catch {
      throw new CountersignError(0, Codes.invalidConfig, 'url is not a URL', 'url');
    }
    if (parsed.protocol !== 'http:' && parsed.protocol !== 'https:') {
      throw new CountersignError(0, Codes.invalidConfig, 'url must be http or https', 'url');
    }
    if (!token) throw new CountersignError(0, Codes.invalidConfig, 'token is required (or set COUNTERSIGN_TOKEN)', 'token');
    this.url = url.replace(/\/+$/, '').replace(/\/v1$/, '');
    this.#token = token;
    this.agent = options.agent;
    this.#fetch = options.fetch ?? globalThis.fetch.bind(globalThis);
    const r = options.retry ?? {};
    this.#retry = { forMs: r.forMs ?? 30_000, minBackoffMs: r.minBackoffMs ?? 100, maxBackoffMs: r.maxBackoffMs ?? 2_000 };
    if (this.#retry.forMs < 0 || this.#retry.minBackoffMs < 0 || this.#retry.maxBackoffMs < this.#retry.minBackoffMs) {
      throw new CountersignError(0, Codes.invalidConfig, 'retry bounds must be positive, minBackoffMs ≤ maxBackoffMs', 'retry');
    }
    this.#pollMs = options.pollMs ?? maxWaitMs;
    if (!(this.#pollMs > 0 && this.#pollMs <= maxWaitMs)) {
      throw new CountersignError(0, Codes.invalidConfig, `pollMs must be a number of ms in (0, ${maxWaitMs}]`, 'pollMs');
    }
    if (options.cancelOnAbort !== false) {
      const c = options.cancelOnAbort ?? {};
      const withinMs = c.withinMs ?? 5_000;
      if (!(withinMs >= 0 && Number.isFinite(withinMs))) {
        throw new CountersignError(0, Codes.invalidConfig, 'cancelOnAbort.withinMs must be a finite number ≥ 0', 'cancelOnAbort');
      }
      this.#cancelOnAbort = { withinMs, onError: c.onError ?? (() => {}) };
    }
    this.#onReportError = options.onReportError ?? (() => {});
  }

  /** The run with the client's agent filled in. */
  runOf(run: RunInfo = {}): Run {
    const agent = run.agent ?? this.agent;
    if (!agent) throw new CountersignError(0, Codes.invalidConfig, 'run.agent is required (or give the client an agent)', 'run.agent');
    return { ...run, agent };
  }

  /**
   * review submits tool calls of one run, in any accepted shape (see toCall),
   * and returns one Result per call. Reviewing the same run id and call ids
   * again re-attaches to the same approvals; such a review is also retried
   * on transient failures (one without ids is not, since it would ask twice).
   * A review that waits gives a run and calls without ids ids of its own for
   * the whole wait, so its polls re-attach rather than open new approvals.
   * Aborting `signal` while it waits cancels the approvals it waits on.
   */
  async review(run: RunInfo, calls: Array<AnyToolCall | Call>, options: ReviewOptions = {}): Promise<Result[]> {
    const body = { run: this.runOf(run), tool_calls: calls.map((c) => toCall(c)) };
    if (body.tool_calls.length === 0) throw new CountersignError(0, Codes.invalidField, 'calls must list at least one call', 'tool_calls');
    const { wait = false, signal, onResult } = options;
    signal?.throwIfAborted();
    if (wait !== false) {
      // Each poll is a new request: without ids each would open approvals
      // of its own. Ids of the client's, for this review, re-attach instead.
      if (!body.run.id) body.run = { ...body.run, id: 'run-' + globalThis.crypto.randomUUID() };
      body.tool_calls = body.tool_calls.map((c, i) => (c.id ? c : { ...c, id: `call-${i}-${globalThis.crypto.randomUUID()}` }));
    }
    const idempotent = !!body.run.id && body.tool_calls.every((c) => c.id);
    const deadline = wait === true ? Infinity : wait === false ? 0 : Date.now() + wait;
    const reported = new Set<number>();
    const opened = wait !== false ? this.#opened(signal) : undefined;
    // With onResult the first request does not wait: what is final already
    // (allowed, denied, decided) is handed over before anything waits. Nor
    // does it when an abort may come: the answer names the approvals to
    // cancel before the long wait begins.
    let first = !!onResult || !!opened;
    return this.#cancellingOnAbort(opened, async () => {
      for (;;) {
        const left = deadline - Date.now();
        const path = left > 0 && !first ? `/v1/reviews?wait=${waitParam(left, this.#pollMs)}` : '/v1/reviews';
        const out = await this.#request<{ results: Result[] }>('POST', path, body, {
          transient: idempotent,
          signal: first && opened ? opened.late : signal,
          until: wait !== false ? deadline : undefined,
        });
        first = false;
        if (!out.data || out.data.results.length !== body.tool_calls.length) {
          throw new CountersignError(out.status, 'unexpected_answer', 'the API answered a different number of results than calls');
        }
        const results = out.data.results;
        opened?.track(results.filter((r) => r.verdict === 'pending' && r.event_id).map((r) => r.event_id!));
        signal?.throwIfAborted();
        results.forEach((r, i) => {
          if (onResult && r.verdict !== 'pending' && !reported.has(i)) {
            reported.add(i);
            onResult(r, i);
          }
        });
        if (!results.some((r) => r.verdict === 'pending') || Date.now() >= deadline) return results;
      }
    });
  }

  /**
   * claim marks the approval eventId as used, right before the tool runs. It
   * succeeds once per approval: again with the same claimId (after a lost
   * answer or a restart), never with another (code "already_claimed"). An
   * approval not approved fails with "not_approved", one that was not
   * claimed within its rule's claim_within of the decision with
   * "approval_lapsed" (the call needs a new decision, under a new call id).
   * A claim the arbiter has not confirmed yet (202), 502/503/504 and network
   * failures are retried; refusals never are.
   */
  async claim(eventId: string, options: { claimId: string; signal?: AbortSignal }): Promise<ApprovalRecord> {
    if (!options?.claimId) throw new CountersignError(0, Codes.invalidField, 'claim needs a claimId (see newClaimId)', 'claim_id');
    const out = await this.#request<{ record: ApprovalRecord }>(
      'POST',
      `/v1/approvals/${encodeURIComponent(eventId)}/claim`,
      { claim_id: options.claimId },
      { transient: true, accepted: true, signal: options.signal },
    );
    return out.data!.record;
  }

  /**
   * report tells Countersign how the claimed call eventId ended, as its
   * claimant, once (`POST /v1/approvals/{id}/outcome`): `succeeded` or
   * `failed`, a short summary (cut to 1 KiB on a character boundary) and
   * optionally the result's SHA-256. run and every adapter report by
   * themselves; a runner that claims with claim reports with report after
   * the tool ran. Retried with the same commandId (after a lost answer, a
   * restart) it succeeds again; another report is refused with
   * "outcome_reported", one before a claim with "not_claimed", and one by
   * anyone but the claimant with "not_permitted". Network failures,
   * 502/503/504 and a report the arbiter has not applied yet (202) are
   * retried with the same id.
   */
  async report(eventId: string, outcome: ExecutionOutcome, options: ReportOptions = {}): Promise<ApprovalRecord> {
    const body: Record<string, unknown> = { command_id: options.commandId ?? newReportId(), status: outcome.status };
    if (outcome.summary) body.summary = summaryText(outcome.summary);
    if (outcome.result_sha256) body.result_sha256 = outcome.result_sha256;
    const out = await this.#request<{ record: ApprovalRecord }>(
      'POST',
      `/v1/approvals/${encodeURIComponent(eventId)}/outcome`,
      body,
      { transient: true, accepted: true, signal: options.signal },
    );
    return out.data!.record;
  }

  /** approval reads an approval; with waitMs it returns once it is terminal or the wait (≤ 60 s) ends. */
  async approval(eventId: string, options: { waitMs?: number; signal?: AbortSignal } = {}): Promise<ApprovalState> {
    return this.#approval(eventId, options.waitMs, options.signal, undefined);
  }

  /** One read of an approval; `until` as in #request (a wait retries for as long as it waits). */
  async #approval(eventId: string, waitMs: number | undefined, signal: AbortSignal | undefined, until: number | undefined): Promise<ApprovalState> {
    let path = `/v1/approvals/${encodeURIComponent(eventId)}`;
    if (waitMs) path += `?wait=${waitParam(waitMs)}`;
    const out = await this.#request<ApprovalState>('GET', path, undefined, { transient: true, signal, until });
    return out.data!;
  }

  /** approvals lists approvals, newest first (filters as the API's: status, agent, run_id, approver=me, limit, cursor). */
  async approvals(
    query: Record<string, string> = {},
    options: { signal?: AbortSignal } = {},
  ): Promise<{ items: ApprovalState[]; next_cursor?: string }> {
    const qs = new URLSearchParams(query).toString();
    const out = await this.#request<{ items: ApprovalState[]; next_cursor?: string }>(
      'GET',
      '/v1/approvals' + (qs ? '?' + qs : ''),
      undefined,
      { transient: true, signal: options.signal },
    );
    return out.data!;
  }

  /**
   * ask asks a human (request_human_input) and waits for the answer, or for
   * why there is none (expired, cancelled, denied). Give the question an id
   * (the tool call's) to re-attach after a restart. Aborting `signal` while
   * it waits cancels the question, as in review.
   */
  async ask(question: string | QuestionInput, options: { run?: RunInfo; wait?: boolean | number; signal?: AbortSignal } = {}): Promise<HumanAnswer> {
    const q = typeof question === 'string' ? { text: question } : question;
    const run = this.runOf(options.run);
    const body: Record<string, unknown> = { run, question: { text: q.text, ...(q.schema ? { schema: q.schema } : {}) } };
    if (q.id) body.id = q.id;
    const { wait = true, signal } = options;
    signal?.throwIfAborted();
    const deadline = wait === true ? Infinity : wait === false ? 0 : Date.now() + wait;
    const idempotent = !!run.id && !!q.id;
    const opened = wait !== false ? this.#opened(signal) : undefined;
    let first = !!opened; // as in review: learn the approval before the long wait
    let eventId: string | undefined;
    return this.#cancellingOnAbort(opened, async () => {
      for (;;) {
        const left = deadline - Date.now();
        let a: HumanAnswer;
        if (eventId && !idempotent) {
          // Without ids the question cannot be asked again: wait on its approval.
          const { record } = await this.#approval(eventId, Math.min(left, this.#pollMs), signal, deadline);
          a = answerOf(record);
        } else {
          const path = left > 0 && !first ? `/v1/questions?wait=${waitParam(left, this.#pollMs)}` : '/v1/questions';
          const until = wait !== false ? deadline : undefined;
          a = (await this.#request<HumanAnswer>('POST', path, body, { transient: idempotent, signal: first && opened ? opened.late : signal, until })).data!;
        }
        first = false;
        eventId ??= a.event_id;
        opened?.track(a.status === 'pending' && eventId ? [eventId] : []);
        signal?.throwIfAborted();
        if (a.status !== 'pending' || Date.now() >= deadline) return a;
      }
    });
  }

  /**
   * decide votes on an approval as the token's subject and returns the
   * record once the vote is counted. A refused vote fails with the refusal's
   * code (self_approval, not_an_approver, closed, stale_arguments, ...).
   */
  async decide(eventId: string, vote: VoteInput, options: { signal?: AbortSignal } = {}): Promise<ApprovalRecord> {
    const body = { ...vote, vote_id: vote.vote_id ?? 'vote-' + globalThis.crypto.randomUUID() };
    const out = await this.#request<{ record: ApprovalRecord }>(
      'POST',
      `/v1/approvals/${encodeURIComponent(eventId)}/votes`,
      body,
      { transient: true, accepted: true, signal: options.signal },
    );
    return out.data!.record;
  }

  /**
   * cancel cancels the pending approval eventId, as the agent that
   * submitted it (or an approver or admin of it); `reason` goes to the
   * server's log. It returns the cancelled record, or undefined when the
   * arbiter had not confirmed it within the API's wait (202): the
   * cancellation is durable and counts as done. An approval decided
   * already fails with "closed"; a token that may not cancel it with
   * "not_permitted". Network failures and 502/503/504 are retried.
   */
  async cancel(eventId: string, options: { reason?: string; signal?: AbortSignal } = {}): Promise<ApprovalRecord | undefined> {
    const out = await this.#request<{ record?: ApprovalRecord }>(
      'POST',
      `/v1/approvals/${encodeURIComponent(eventId)}/cancel`,
      options.reason ? { reason: options.reason } : {},
      { transient: true, signal: options.signal },
    );
    return out.status === 202 ? undefined : out.data?.record;
  }

  /**
   * waitDecided waits until every approval of eventIds is decided and
   * returns their states, in order (long polls of GET /v1/approvals/{id}).
   * Aborting `signal` cancels those still pending, as an aborted review
   * does, and rejects with the signal's reason.
   */
  async waitDecided(eventIds: string[], options: { signal?: AbortSignal } = {}): Promise<ApprovalState[]> {
    const { signal } = options;
    signal?.throwIfAborted();
    const undecided = new Set(eventIds);
    const opened = this.#opened(signal);
    opened?.track([...undecided]);
    return this.#cancellingOnAbort(opened, () =>
      Promise.all(
        eventIds.map(async (id) => {
          for (;;) {
            const st = await this.#approval(id, this.#pollMs, signal, Infinity);
            if (terminalStatuses.has(st.record.status)) {
              undecided.delete(id);
              opened?.track([...undecided]);
              return st;
            }
            signal?.throwIfAborted();
          }
        }),
      ),
    );
  }

  /**
   * run gates one call: review, wait for the decision, claim, then call fn
   * with the arguments to run (possibly edited by a human). A call the policy
   * allows outright runs with no claim. A call that may not run is not
   * passed to fn; its result's reason says why. fn runs at most once per
   * approval across every worker: a call whose approval was already claimed
   * (say by a worker that crashed after claiming) comes back
   * `already_executed`; one approved too long ago to claim (its rule's
   * claim_within) comes back `expired` with code "approval_lapsed". Aborting
   * `signal` while it waits for the decision cancels the approval. The wait
   * outlives restarts of the server: it re-attaches to the same approval.
   *
   * fn gets the arguments and a RunContext whose `receipt` is the call's
   * receipt, for a tool that verifies receipts: pass it along with
   * receiptHeaders(context.receipt).
   *
   * After fn of a claimed call returns or throws, run reports the outcome
   * (report): `succeeded` (with `summarize`'s summary), or `failed` with the
   * error's message. The report never changes what fn returned or threw:
   * one that fails is `outcomeError` in the answer and is given to the
   * client's onReportError.
   */
  async run<T>(
    run: RunInfo,
    call: AnyToolCall | Call,
    fn: (args: Record<string, unknown>, context: RunContext) => T | Promise<T>,
    options: RunOptions<T> = {},
  ): Promise<RunOutcome<T>> {
    const [result] = await this.review(run, [call], { wait: true, signal: options.signal });
    if (result!.verdict !== 'allowed') return { result: result!, ran: false };
    const context: RunContext = { result: result!, receipt: result!.receipt };
    if (result!.event_id) {
      try {
        const record = await this.claim(result!.event_id, { claimId: options.claimId ?? newClaimId(), signal: options.signal });
        context.record = record;
        context.receipt = record.claim?.receipt ?? context.receipt;
      } catch (err) {
        if (err instanceof CountersignError && err.code === Codes.alreadyClaimed) {
          return {
            result: {
              ...result!,
              verdict: 'already_executed',
              reason: 'This approved call was already claimed; it may have run once and will not run again.',
            },
            ran: false,
          };
        }
        if (err instanceof CountersignError && err.code === Codes.approvalLapsed) {
          const { arguments: _approved, ...rest } = result!;
          return {
            result: {
              ...rest,
              verdict: 'expired',
              code: Codes.approvalLapsed,
              reason: 'This call was approved, but not run in time: the approval lapsed and the call was not run. Propose it again for a new decision.',
            },
            ran: false,
          };
        }
        throw err;
      }
    }
    const args = result!.arguments ?? toCall(call).arguments ?? {};
    const eventId = options.report === false ? undefined : result!.event_id;
    let output: T;
    try {
      output = await fn(args, context);
    } catch (err) {
      if (eventId) await this.#reportRun(eventId, { status: 'failed', summary: errorText(err) });
      throw err;
    }
    const out: RunOutcome<T> = { result: result!, ran: true, output };
    if (context.receipt) out.receipt = context.receipt;
    if (eventId) {
      let extra: Partial<ExecutionOutcome> = {};
      try {
        extra = options.summarize?.(output) ?? {};
      } catch {
        /* a summary that cannot be made leaves the report without one */
      }
      const reportError = await this.#reportRun(eventId, { ...extra, status: extra.status ?? 'succeeded' });
      if (reportError !== undefined) out.outcomeError = reportError;
    }
    return out;
  }

  /**
   * #reportRun reports how a claimed call's function ended; it never throws.
   * It answers the report's error (undefined when it was reported).
   */
  async #reportRun(eventId: string, outcome: ExecutionOutcome): Promise<unknown> {
    try {
      await this.report(eventId, outcome);
      return undefined;
    } catch (err) {
      try {
        this.#onReportError(err, eventId);
      } catch {
        /* a logger's failure does not change the tool's result */
      }
      return err ?? new Error('the outcome report failed');
    }
  }

  /**
   * guard wraps a tool's execute function so that every call goes review →
   * wait → claim → execute, with the arguments Countersign approved (a
   * human's edit replaces the model's). A call that may not run is not
   * executed: the tool returns the reason instead (see onBlocked), which the
   * framework hands the model as the tool result. Works with any tool object
   * whose execute takes the arguments first: the AI SDK's tool(), the OpenAI
   * Agents SDK's tool() options, LangChain's tool functions.
   */
  guard<T extends { execute?: (input: any, ...rest: any[]) => any; name?: string }>(
    tool: T,
    options: GuardOptions<Parameters<NonNullable<T['execute']>> extends [any, ...infer R] ? R : never> = {},
  ): T {
    const execute = tool.execute;
    if (!execute) throw new CountersignError(0, Codes.invalidField, 'guard needs a tool with an execute function', 'execute');
    return { ...tool, execute: this.guardFunction(execute, { ...options, name: options.name ?? tool.name }) };
  }

  /** guardFunction is guard for a bare function whose first argument is the tool's arguments. */
  guardFunction<A extends unknown[], R>(
    execute: (input: any, ...rest: A) => R | Promise<R>,
    options: GuardOptions<A>,
  ): (input: any, ...rest: A) => Promise<R | unknown> {
    const name = options.name;
    if (!name) throw new CountersignError(0, Codes.invalidField, 'guard needs the tool name', 'name');
    markGuarded(this, name, options.toolSchema);
    return async (input: any, ...rest: A) => {
      const run = typeof options.run === 'function' ? options.run(...rest) : options.run ?? {};
      const id = (options.callId ?? findCallId)(...rest);
      const call: Call = { id, name, arguments: input ?? {} };
      if (options.toolSchema) call.tool_schema = options.toolSchema;
      const out = await this.run(run, call, (args) => execute(args, ...rest), { signal: findSignal(rest) });
      if (out.ran) return out.output as R;
      return options.onBlocked ? options.onBlocked(out.result) : blockedMessage(out.result);
    };
  }

  /**
   * decisions follows GET /v1/events and yields every outcome
   * (countersign.approval.decided/v1) once. When the stream drops it
   * reconnects with backoff, sending Last-Event-ID, from which the server
   * replays every event stored meanwhile. After every (re)connect it also
   * re-reads the approvals `watch` names and yields those already decided:
   * a stream opened without Last-Event-ID (the first, or one in a new
   * process) starts at the present. The outcomes yielded are remembered in
   * memory (the last 10 000). Break out of the loop or abort `signal` to
   * stop.
   */
  async *decisions(options: DecisionsOptions = {}): AsyncGenerator<Decided> {
    const minBackoff = options.minBackoffMs ?? 200;
    const maxBackoff = options.maxBackoffMs ?? 5_000;
    const stop = new AbortController();
    const onAbort = () => stop.abort(options.signal?.reason);
    options.signal?.addEventListener('abort', onAbort, { once: true });
    if (options.signal?.aborted) stop.abort(options.signal.reason);
    const seen = new RecentSet(10_000);
    let lastEventId: string | undefined;
    let backoff = minBackoff;
    try {
      while (!stop.signal.aborted) {
        let resp: Response;
        try {
          const headers: Record<string, string> = { Authorization: `Bearer ${this.#token}`, Accept: 'text/event-stream' };
          if (lastEventId) headers['Last-Event-ID'] = lastEventId;
          resp = await this.#fetch(this.url + '/v1/events', { headers, signal: stop.signal });
        } catch (err) {
          if (stop.signal.aborted) return;
          await this.#pause(backoff, stop.signal);
          backoff = Math.min(backoff * 2, maxBackoff);
          continue;
        }
        if (!resp.ok || !resp.body) {
          const err = await errorOf(resp);
          if (!err.transient && resp.status !== 429) throw err;
          await this.#pause(backoff, stop.signal);
          backoff = Math.min(backoff * 2, maxBackoff);
          continue;
        }
        backoff = minBackoff;
        // Look back: what was decided before this connection is read, not streamed.
        for (const id of options.watch?.() ?? []) {
          if (seen.has(id)) continue;
          let state: ApprovalState;
          try {
            state = await this.approval(id, { signal: stop.signal });
          } catch (err) {
            if (err instanceof CountersignError && err.code === Codes.unknownEvent) continue;
            throw err;
          }
          if (terminalStatuses.has(state.record.status)) {
            seen.add(id);
            yield decidedOf(state);
          }
        }
        try {
          for await (const ev of parseEvents(resp.body)) {
            if (ev.id) lastEventId = ev.id;
            if (ev.event !== 'decided') continue;
            let d: Decided;
            try {
              d = JSON.parse(ev.data) as Decided;
            } catch {
              continue;
            }
            if (!d.event_id || seen.has(d.event_id)) continue;
            seen.add(d.event_id);
            yield d;
          }
        } catch {
          if (stop.signal.aborted) return;
        }
        // The stream ended: reconnect.
        await this.#pause(backoff, stop.signal);
        backoff = Math.min(backoff * 2, maxBackoff);
      }
    } finally {
      options.signal?.removeEventListener('abort', onAbort);
      stop.abort();
    }
  }

  /** What a wait with signal opens, when an abort cancels it. */
  #opened(signal: AbortSignal | undefined): Opened | undefined {
    return signal && this.#cancelOnAbort ? new Opened(signal, this.#cancelOnAbort.withinMs) : undefined;
  }

  /**
   * #cancellingOnAbort runs a wait. When its signal aborts, it cancels the
   * approvals the wait was waiting on (best effort, within the bound) and
   * rejects with the signal's reason; any other end of the wait cancels
   * nothing.
   */
  async #cancellingOnAbort<T>(opened: Opened | undefined, wait: () => Promise<T>): Promise<T> {
    if (!opened) return wait();
    try {
      return await wait();
    } catch (err) {
      if (!opened.signal.aborted) throw err;
      const ids = opened.ids;
      if (ids.length > 0) {
        const budget = AbortSignal.timeout(Math.max(1, opened.msLeft()));
        const reason = 'the client aborted the call' + abortText(opened.signal.reason);
        await Promise.all(
          ids.map((id) =>
            this.cancel(id, { reason, signal: budget }).catch((e: unknown) => {
              // Decided meanwhile: nothing is left to cancel.
              if (e instanceof CountersignError && e.code === Codes.closed) return;
              try {
                this.#cancelOnAbort!.onError(e, id);
              } catch {
                /* a logger's failure does not change the abort */
              }
            }),
          ),
        );
      }
      throw opened.signal.reason;
    } finally {
      opened.dispose();
    }
  }

  /** The last Last-Event-ID is kept by the generator; this pauses without throwing on abort. */
  async #pause(ms: number, signal: AbortSignal): Promise<void> {
    try {
      await sleep(jitter(ms), signal);
    } catch {
      /* aborted: the caller's loop ends */
    }
  }

  /**
   * #request sends one JSON request and retries what `opts` allows: until
   * retry.forMs has passed since its first failure, or, for a request that
   * waits for humans, until `until` (the wait's deadline; Infinity for a
   * wait that ends only with its signal) if that is later. A long poll that
   * fails late, say when the server restarts, is retried like one that
   * fails at once. A 2xx answer's body is decoded; others are a
   * CountersignError.
   */
  async #request<T>(
    method: string,
    path: string,
    body: unknown,
    opts: { transient: boolean; accepted?: boolean; signal?: AbortSignal; until?: number },
  ): Promise<{ status: number; data: T | undefined }> {
    const payload = body === undefined ? undefined : JSON.stringify(body);
    let deadline: number | undefined;
    let backoff = this.#retry.minBackoffMs;
    for (;;) {
      let again = false;
      let failure: CountersignError | undefined;
      let resp: Response | undefined;
      try {
        const headers: Record<string, string> = { Authorization: `Bearer ${this.#token}`, Accept: 'application/json' };
        if (payload !== undefined) headers['Content-Type'] = 'application/json';
        resp = await this.#fetch(this.url + path, { method, headers, body: payload, signal: opts.signal });
      } catch (err) {
        if (opts.signal?.aborted) throw opts.signal.reason;
        failure = new CountersignError(0, Codes.network, `${method} ${path}: the API did not answer`, undefined, { cause: err });
        again = opts.transient;
      }
      if (resp) {
        if (resp.status === 202 && opts.accepted) {
          await resp.body?.cancel();
          failure = new CountersignError(202, Codes.inFlight, 'the arbiter has not applied it yet; it is durable, read the approval later');
          again = true;
        } else if (resp.ok) {
          const text = await resp.text();
          let data: T | undefined;
          if (text) {
            try {
              data = JSON.parse(text) as T;
            } catch (err) {
              throw new CountersignError(resp.status, 'unexpected_answer', `${method} ${path}: the answer is not JSON`, undefined, { cause: err });
            }
          }
          return { status: resp.status, data };
        } else {
          failure = await errorOf(resp);
          again = opts.transient && failure.transient;
        }
      }
      deadline ??= Math.max(Date.now() + this.#retry.forMs, opts.until ?? 0);
      if (!again || Date.now() + backoff > deadline) throw failure!;
      await sleep(jitter(backoff), opts.signal);
      backoff = Math.min(backoff * 2, this.#retry.maxBackoffMs);
    }
  }
}

/**
 * The approvals one wait is waiting on, and the time its abort may take.
 * `late` aborts withinMs after the caller's signal: a request whose answer
 * says what the wait opened uses it, so that an abort during that request
 * still learns which approvals to cancel.
 */
class Opened {
  ids: string[] = [];
  #abortedAt: number | undefined;
  #timer: ReturnType<typeof setTimeout> | undefined;
  readonly #late = new AbortController();

  constructor(
    readonly signal: AbortSignal,
    readonly withinMs: number,
  ) {
    signal.addEventListener('abort', this.#onAbort, { once: true });
  }

  #onAbort = () => {
    this.#abortedAt = Date.now();
    this.#timer = setTimeout(() => this.#late.abort(this.signal.reason), this.withinMs);
  };

  get late(): AbortSignal {
    return this.#late.signal;
  }

  track(ids: string[]): void {
    this.ids = ids;
  }

  /** What is left of the time the abort may take. */
  msLeft(): number {
    return Math.max(0, (this.#abortedAt ?? Date.now()) + this.withinMs - Date.now());
  }

  dispose(): void {
    this.signal.removeEventListener('abort', this.#onAbort);
    clearTimeout(this.#timer);
  }
}

/** The text of a thrown value, for a failed call's summary. */
function errorText(err: unknown): string {
  if (err instanceof Error) return err.message || err.name;
  if (typeof err === 'string') return err;
  try {
    return JSON.stringify(err) ?? String(err);
  } catch {
    return String(err);
  }
}

function abortText(reason: unknown): string {
  const text = reason instanceof Error ? reason.message : typeof reason === 'string' ? reason : '';
  return text ? ': ' + text.slice(0, 200) : '';
}

/** Between half and all of ms, so that retrying clients spread out. */
function jitter(ms: number): number {
  return ms / 2 + Math.random() * (ms / 2);
}

async function errorOf(resp: Response): Promise<CountersignError> {
  const text = await resp.text().catch(() => '');
  // Over a budget (429) the answer says when to send again.
  const seconds = Number(resp.headers.get('Retry-After'));
  const retryAfter = resp.status === 429 && Number.isFinite(seconds) && seconds > 0 ? seconds : undefined;
  try {
    const env = JSON.parse(text) as { error?: { code?: string; message?: string; field?: string; retry_after?: number } };
    if (env.error?.code) {
      return new CountersignError(resp.status, env.error.code, env.error.message ?? '', env.error.field || undefined, {
        retryAfter: retryAfter ?? (resp.status === 429 ? env.error.retry_after : undefined),
      });
    }
  } catch {
    /* not the API's error body */
  }
  return new CountersignError(resp.status, `http_${resp.status}`, text.trim().slice(0, 500) || resp.statusText, undefined, { retryAfter });
}

/** A message for the model when a guarded call does not run. */
export function blockedMessage(r: Result): string {
  if (r.reason) return r.reason;
  switch (r.verdict) {
    case 'denied':
      return 'This tool call was denied; it was not run.';
    case 'expired':
      return 'No human decided on this tool call before its deadline; it was not run.';
    case 'cancelled':
      return 'The approval request for this tool call was cancelled; it was not run.';
    case 'already_executed':
      return 'This approved call was already executed once; it will not run again.';
    default:
      return `This tool call was not run (${r.verdict}).`;
  }
}

/** The call id the agent frameworks pass next to a tool's arguments. */
export function findCallId(...rest: unknown[]): string | undefined {
  for (const a of rest) {
    if (typeof a !== 'object' || a === null) continue;
    const o = a as Record<string, any>;
    if (typeof o.toolCallId === 'string') return o.toolCallId;
    const tc = o.toolCall;
    if (tc && typeof tc === 'object') {
      if (typeof tc.callId === 'string') return tc.callId;
      if (typeof tc.call_id === 'string') return tc.call_id;
      if (typeof tc.id === 'string') return tc.id;
    }
  }
  return undefined;
}

function findSignal(rest: unknown[]): AbortSignal | undefined {
  for (const a of rest) {
    if (typeof a === 'object' && a !== null) {
      const s = (a as { abortSignal?: unknown; signal?: unknown }).abortSignal ?? (a as { signal?: unknown }).signal;
      if (s instanceof AbortSignal) return s;
    }
  }
  return undefined;
}

/** decidedOf is the outcome event of a terminal record, as the stream would carry it. */
export function decidedOf(state: ApprovalState): Decided {
  const rec = state.record;
  const req = rec.request;
  const d: Decided = {
    spec: 'countersign.approval.decided/v1',
    event_id: req.event_id,
    status: rec.status as Decided['status'],
    agent: req.run.agent,
    outcome: rec.outcome ?? { decision: 'cancel', decided_by: [], decided_at: rec.updated_at },
    revision: state.revision,
    decided_at: rec.outcome?.decided_at ?? rec.updated_at,
  };
  if (req.run.id) d.run_id = req.run.id;
  if (req.tool_call) d.tool_name = req.tool_call.name;
  return d;
}

function answerOf(rec: ApprovalRecord): HumanAnswer {
  const a: HumanAnswer = { event_id: rec.request.event_id, status: rec.status };
  if (rec.outcome?.reason) a.reason = rec.outcome.reason;
  if (rec.status === 'answered' && rec.outcome) {
    a.answer = { action: rec.outcome.action ?? 'accept', ...(rec.outcome.arguments ? { content: rec.outcome.arguments } : {}) };
  }
  return a;
}

/** A set that forgets its oldest entries beyond a bound. */
class RecentSet {
  #items = new Set<string>();
  constructor(readonly max: number) {}
  has(k: string): boolean {
    return this.#items.has(k);
  }
  add(k: string): void {
    this.#items.add(k);
    if (this.#items.size > this.max) this.#items.delete(this.#items.values().next().value!);
  }
}
