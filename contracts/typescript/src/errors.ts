/**
 * Every failure the client reports is a CountersignError: an answer of the
 * API other than 2xx (its HTTP status and the API's stable code, message and
 * field), a network failure (status 0, code "network"), or a local check
 * (status 0, a code of its own such as "invalid_tool_call" or
 * "webhook_no_matching_signature"). Branch on `code`, never on `message`.
 */
export class CountersignError extends Error {
  /** HTTP status of the API's answer; 0 when the API did not answer. */
  readonly status: number;
  /** Stable machine code, e.g. "already_claimed", "not_approved", "invalid_field". */
  readonly code: string;
  /** The request field at fault, when there is one (e.g. "tool_calls[0].arguments"). */
  readonly field: string | undefined;
  /**
   * Over a budget (status 429: rate_limited, too_many_streams,
   * pending_quota, too_many_connections): the seconds to wait before
   * sending again, from Retry-After. Undefined for other errors.
   */
  readonly retryAfter: number | undefined;

  constructor(
    status: number,
    code: string,
    message: string,
    field?: string,
    options?: { cause?: unknown; retryAfter?: number },
  ) {
    super(message, options);
    this.name = 'CountersignError';
    this.status = status;
    this.code = code;
    this.field = field;
    this.retryAfter = options?.retryAfter;
  }

  /** Whether sending the same request again may succeed (network, 502, 503, 504). */
  get transient(): boolean {
    return this.code === 'network' || this.status === 502 || this.status === 503 || this.status === 504;
  }
}

/** Codes the API and this client use, for matching without typos. */
export const Codes = {
  alreadyClaimed: 'already_claimed',
  notApproved: 'not_approved',
  /** An approval not claimed within its rule's claim_within of the decision: the call needs a new decision. */
  approvalLapsed: 'approval_lapsed',
  /** A claim or command from a token that may not give it (a claim by another agent than the submitter). */
  notPermitted: 'not_permitted',
  /** A vote or command from someone the live directory no longer lists. */
  unknownApprover: 'unknown_approver',
  /** An extend that would not move the deadline later. */
  deadlineNotLater: 'deadline_not_later',
  notAnApprover: 'not_an_approver',
  selfApproval: 'self_approval',
  duplicateVote: 'duplicate_vote',
  closed: 'closed',
  /** An outcome report for an approval nobody claimed. */
  notClaimed: 'not_claimed',
  /** An outcome report after another report (another command id) of the same call. */
  outcomeReported: 'outcome_reported',
  staleArguments: 'stale_arguments',
  decisionNotAllowed: 'decision_not_allowed',
  unknownEvent: 'unknown_event',
  argumentsChanged: 'arguments_changed',
  invalidArguments: 'invalid_arguments',
  invalidField: 'invalid_field',
  unauthenticated: 'unauthenticated',
  forbidden: 'forbidden',
  unavailable: 'unavailable',
  /** 429: the token made requests of this kind faster than its rate; retry after `retryAfter` seconds. */
  rateLimited: 'rate_limited',
  /** 429: the token holds its most live event streams. */
  tooManyStreams: 'too_many_streams',
  /** 429: the review would pass the agent's or the tenant's most pending approvals. */
  pendingQuota: 'pending_quota',
  /** 429: the server, or this client's address, holds its most connections. */
  tooManyConnections: 'too_many_connections',
  /** The API did not answer (connection refused, reset, DNS). */
  network: 'network',
  /** A vote or claim the arbiter had not applied when retries ran out. */
  inFlight: 'in_flight',
  /** A tool call in none of the accepted shapes. */
  invalidToolCall: 'invalid_tool_call',
  /** A bad client configuration. */
  invalidConfig: 'invalid_config',
} as const;
