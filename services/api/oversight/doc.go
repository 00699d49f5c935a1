// Package oversight computes how approvals are being decided: for each
// approver and each rule, over a window of requests, the decisions made,
// the approval rate, the time to decide (median and p90, with the spread a
// box plot draws), the decisions on high and critical risk made faster
// than a threshold, and the requests that expired with nobody deciding;
// per channel, the time from request to outcome; what became of the
// approved calls (claimed, reported or not); and the shadow rules' verdicts.
//
// It is a pure function of records (Compute) with no I/O: the API feeds it
// the records a caller may read, and serves the Report as JSON, as
// Prometheus metrics and to the inbox's oversight page.
//
// Definitions (docs/oversight.md says the same for people):
//
//   - The window holds the requests created in [Since, Until). A request's
//     votes count in the window of its creation, however late they came.
//   - A decision is one counted vote (refused votes are not decisions). Its
//     time to decide is the vote's decided_at minus the request's
//     created_at, never below zero.
//   - The approval rate is (approve + edit) / (approve + edit + reject +
//     respond); answers to human_input questions are decisions but not in
//     the rate. With no such decisions the rate is absent, not zero.
//   - Quantiles interpolate linearly between the closest ranks (the
//     "type 7" estimator of R and NumPy): the median of 10 s and 20 s is
//     15 s.
//   - A fast decision is one on a high or critical risk request whose time
//     to decide is below the threshold.
//   - A request expired undecided when time decided it (its outcome names
//     decided_by "timeout": expired, or approved by on_timeout: approve).
//     It counts for its rule, and for every approver it named who had not
//     voted on it (a request that names no approvers, open to any
//     approver, counts for its rule only).
//   - A request's channel is what decided it (notifier.DecisionChannel):
//     the via of the vote that completed it, "timeout" or "cancelled"; its
//     time to decision runs from its creation to its outcome. Pending
//     requests have neither.
//   - Of the approved requests, a claimed one was about to run; its
//     claimant reports succeeded or failed, and a claimed one without a
//     report is "not reported" (the runner died, never reports, or the call
//     is still running).
package oversight
