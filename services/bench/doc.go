// Package bench measures Countersign against the budgets of DESIGN §9 on the
// machine it runs on. It is what `countersign bench` runs.
//
// For each sync mode (fsync on every write, or the JetStream default of a
// lazy flush) and each of Config.Count repetitions, Run starts a fresh
// embedded nats-server with JetStream on disk, reached over TCP loopback with
// one client connection per role as in production (arbiter, agent gate,
// resolver bot), provisions the contract's streams and bucket, starts an
// arbiter and then measures, against that same server:
//
//  1. the raw JetStream baseline: sync and async publish rates and a paced
//     KV put→watch latency. The floor for full cycles is the async publish
//     rate divided by six, the persisted writes of one cycle;
//  2. full cycles: concurrent agents each review a gated call, a bot
//     approves it once its record is pending, the arbiter decides, the
//     waiter wakes the agent and the agent claims its permit; completed
//     claims per second, and their ratio to the floor and to the raw sync
//     publish rate;
//  3. decision → resumed latency, one approval at a time, and its ratio to
//     the raw KV put→watch latency.
//
// The repetitions of the modes alternate, so noise from elsewhere on a shared
// machine falls on both; the report gives the median of every figure (and of
// every ratio, each taken within its repetition) with the range.
//
// Then, once and against a fresh server, the pending-capacity mode: many
// waits registered with Gate.ReviewAsync, the waiter's memory per wait, the
// goroutines it adds, and how long after the last decision the last waiting
// run is woken.
//
// Every figure is printed beside its target with PASS or MISS, and returned in
// a JSON-serializable Report. Policy evaluation, which needs no server, is
// measured once per run.
package bench
