//go:build unix

package bench

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// benchCycleAgents is the number of agents that run cycles side by side in
// BenchmarkCycle.
const benchCycleAgents = 16

// BenchmarkCycle runs b.N full cycles (request → record → vote → decided →
// agent resumed → claim confirmed) against one embedded lazy-sync server in
// this process, with the arbiter, the gate and the bot voter of
// `countersign bench`, benchCycleAgents agents at a time. Besides the time
// per cycle it reports the messages each cycle stored, in total and by
// stream (a message stored and later removed, such as a purged timer,
// counts: it was written).
//
// It also reports the CPU time of the whole process per cycle. Its main use
// is a repeatable instruction count: run it under
// `valgrind --tool=callgrind` with two fixed cycle counts and divide the
// difference of the two totals by the difference of the counts, which
// leaves out the server's start and the warm-up (see BENCHMARKS.md).
func BenchmarkCycle(b *testing.B) {
	ctx := context.Background()
	st, err := startStack(ctx, SyncLazy, b.TempDir(), 0)
	if err != nil {
		b.Fatal(err)
	}
	defer st.close()
	_, admin, err := st.connect(roleProvision)
	if err != nil {
		b.Fatal(err)
	}
	bot, err := startBot(ctx, st, true)
	if err != nil {
		b.Fatal(err)
	}
	defer bot.stop()
	prefix := "bcyc-" + uuid.NewString()[:8]
	if _, err := warmUpCycles(ctx, st, bot, prefix+"-warm", benchCycleAgents); err != nil {
		b.Fatal(err)
	}
	before := streamSeqs(ctx, b, admin)
	conns0 := connStats(st)
	cpu0 := processCPU(b)
	b.ResetTimer()
	var next atomic.Int64
	var wg sync.WaitGroup
	errc := make(chan error, benchCycleAgents)
	for range benchCycleAgents {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1)
				if i > int64(b.N) {
					return
				}
				if err := cycle(ctx, st.gate, bot, newRun(prefix, int(i))); err != nil {
					errc <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	b.ReportMetric(float64((processCPU(b)-cpu0).Microseconds())/float64(b.N), "cpu-µs/cycle")
	close(errc)
	if err := <-errc; err != nil {
		b.Fatal(err)
	}
	conns1 := connStats(st)
	for name, c := range conns1 {
		c0 := conns0[name]
		if in := c.InMsgs - c0.InMsgs; in > 0 {
			b.ReportMetric(float64(in)/float64(b.N), "recv-"+name+"/cycle")
		}
		if out := c.OutMsgs - c0.OutMsgs; out > 0 {
			b.ReportMetric(float64(out)/float64(b.N), "sent-"+name+"/cycle")
		}
	}
	after := streamSeqs(ctx, b, admin)
	var total uint64
	for name, seq := range after {
		d := seq - before[name]
		total += d
		if d > 0 {
			b.ReportMetric(float64(d)/float64(b.N), "stored-"+strings.ToLower(name)+"/cycle")
		}
	}
	b.ReportMetric(float64(total)/float64(b.N), "stored/cycle")
}

// connStats sums the message counts of the stack's client connections by
// role (the name after "countersign-bench-").
func connStats(st *stack) map[string]nats.Statistics {
	out := map[string]nats.Statistics{}
	for _, nc := range st.conns {
		name := strings.TrimPrefix(nc.Opts.Name, "countersign-bench-")
		s := nc.Stats()
		c := out[name]
		c.InMsgs += s.InMsgs
		c.OutMsgs += s.OutMsgs
		out[name] = c
	}
	return out
}

// processCPU is the CPU time (user and system) this process has used: the
// server, the arbiter, the agents and the bot together.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// streamSeqs returns the last sequence of every stream: how many messages
// each has stored since it was created.
func streamSeqs(ctx context.Context, b *testing.B, js jetstream.JetStream) map[string]uint64 {
	seqs := map[string]uint64{}
	l := js.ListStreams(ctx)
	for info := range l.Info() {
		seqs[info.Config.Name] = info.State.LastSeq
	}
	if err := l.Err(); err != nil {
		b.Fatal(err)
	}
	return seqs
}
