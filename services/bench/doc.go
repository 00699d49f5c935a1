// Package bench measures Countersign against the budgets of DESIGN §9 on the
// machine it runs on. It is what `countersign bench` runs.
//
// For each sync mode (fsync on every write, or the JetStream default of a
// lazy flush) Run starts its own embedded nats-server with JetStream on disk,
// reached over TCP loopback with one client connection per role as in
// production (arbiter, agent gate, resolver bot), provisions the contract's
// streams and bucket, starts an arbiter and then measures, in the same run:
//
//  1. the raw JetStream baseline: sync and async publish rates and a paced
//     KV put→watch latency. The floor for full cycles is the async publish
//     rate divided by six, the persisted writes of one cycle;
//  2. full cycles: concurrent agents each review a gated call, a bot
//     approves it, the waiter wakes the agent and the agent claims its
//     permit; completed claims per second, and their ratio to the floor;
//  3. decision → resumed latency, one approval at a time;
//  4. pending capacity: many waits registered with Gate.ReviewAsync, the
//     waiter's memory per wait, the goroutines it adds, and how long after
//     the last decision the last waiting run is woken.
//
// Every figure is printed beside its target with PASS or MISS, and returned in
// a JSON-serializable Report. Policy evaluation, which needs no server, is
// measured once per run.
package bench
