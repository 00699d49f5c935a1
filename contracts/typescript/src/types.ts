import type { ApprovalDecided, ApprovalRecord, Run } from './schema.gen.js';

export type * from './schema.gen.js';

/** What a review answers for one call (DESIGN §5). */
export type Verdict =
  | 'allowed'
  | 'denied'
  | 'pending'
  | 'responded'
  | 'answered'
  | 'expired'
  | 'cancelled'
  | 'already_executed';

/** The run a call belongs to. `agent` defaults to the client's agent. */
export type RunInfo = Omit<Run, 'agent'> & { agent?: string };

/** The answer of `POST /v1/reviews` for one tool call. */
export interface Result {
  tool_call_id: string;
  verdict: Verdict;
  /** The approval's id, for gated calls. */
  event_id?: string;
  /** Why the call does not run, in words meant for the model. */
  reason?: string;
  /** The policy rule that decided. */
  rule?: string;
  /**
   * A stable code for a verdict worth branching on: "approval_lapsed" (an
   * expired verdict: approved, but not claimed within its rule's
   * claim_within), "request_refused" (a denied one: Countersign refused the
   * approval request).
   */
  code?: string;
  /** The arguments to run with: the requested ones, or a human's edit. */
  arguments?: Record<string, unknown>;
  /** The standing grant that allowed the call without a new request. */
  grant_id?: string;
  /**
   * The receipt Countersign signed for a call allowed without an approval
   * (under a standing grant, or by a policy rule with `receipt: true`): pass
   * it to the tool in the Countersign-Receipt header. An approved call's
   * receipt comes with its claim (`record.claim.receipt`).
   */
  receipt?: string;
}

/** The answer of `GET /v1/approvals/{event_id}`. */
export interface ApprovalState {
  record: ApprovalRecord;
  revision: number;
}

/** A question for a human (`request_human_input`). */
export interface QuestionInput {
  /** Names the question within its run: asking again re-attaches (use the tool call's id). */
  id?: string;
  text: string;
  /** JSON Schema the answer's content must satisfy. */
  schema?: Record<string, unknown>;
}

/** A human's answer, or why there is none. */
export interface HumanAnswer {
  event_id?: string;
  /** answered, or pending, expired, cancelled, denied. */
  status: 'answered' | 'pending' | 'expired' | 'cancelled' | 'denied' | string;
  answer?: { action: 'accept' | 'decline' | 'cancel'; content?: Record<string, unknown>; answered_by?: string };
  reason?: string;
  rule?: string;
}

/** A decision on an approval, cast as the token's subject. */
export interface VoteInput {
  /** Idempotency key; the client makes one when absent, so a retried vote counts once. */
  vote_id?: string;
  decision: 'approve' | 'reject' | 'edit' | 'respond' | 'answer';
  comment?: string;
  /** The edited arguments (decision edit). */
  arguments?: Record<string, unknown>;
  /** Hash of the arguments the approver saw; a vote on others is refused (stale_arguments). */
  arguments_sha256?: string;
  /** The answer to a question (decision answer). */
  answer?: { action: 'accept' | 'decline' | 'cancel'; content?: Record<string, unknown> };
}

/**
 * How a claimed call ended, as its claimant reports it once
 * (`POST /v1/approvals/{event_id}/outcome`; the record's `execution`).
 */
export interface ExecutionOutcome {
  status: 'succeeded' | 'failed';
  /** A short text for people: at most 1 KiB of UTF-8 (report cuts a longer one on a character boundary). */
  summary?: string;
  /** The lowercase hex SHA-256 of the call's result (optional). */
  result_sha256?: string;
}

/** A terminal outcome as `decisions()` and webhooks deliver it. */
export type Decided = ApprovalDecided;

/** Statuses of a record that no longer changes. */
export const terminalStatuses: ReadonlySet<string> = new Set([
  'approved',
  'rejected',
  'responded',
  'answered',
  'expired',
  'cancelled',
]);
