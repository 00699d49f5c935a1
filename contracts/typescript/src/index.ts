/**
 * Countersign's TypeScript client: durable human approval for an agent's
 * tool calls, over the HTTP API, with nothing but the platform's fetch.
 * Framework adapters live in the subpaths ./openai-agents, ./ai-sdk and
 * ./langgraph.
 */
export { Countersign, newClaimId, newReportId, summaryText, maxSummaryBytes, blockedMessage, findCallId, decidedOf, receiptHeader, receiptHeaders } from './client.js';
export type { CountersignOptions, RetryOptions, ReviewOptions, GuardOptions, DecisionsOptions, RunOutcome, RunOptions, ReportOptions, RunContext } from './client.js';
export { CountersignError, Codes } from './errors.js';
export { toCall } from './toolcalls.js';
export type { Call, AnyToolCall, OpenAIToolCall, OpenAIFunctionCallItem, AnthropicToolUse } from './toolcalls.js';
export { verifyWebhook, webhookReceiver, parseSecret, WebhookCodes } from './webhook.js';
export type { WebhookMessage, WebhookReceiver, WebhookReceiverOptions, VerifyOptions, HeaderSource } from './webhook.js';
export { parseEvents } from './sse.js';
export type { ServerEvent } from './sse.js';
export { terminalStatuses } from './types.js';
export type * from './types.js';
