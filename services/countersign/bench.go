package main

import (
	"context"
	"encoding/json"
	"flag"
	"io"
	"os"
	"os/signal"
	"time"

	"github.com/countersign/countersign/services/bench"
)

func cmdBench(args []string, out io.Writer) error {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	syncMode := fs.String("sync", "both", "JetStream sync mode: always, lazy or both")
	duration := fs.Duration("duration", 5*time.Second, "length of each measurement")
	concurrency := fs.Int("concurrency", 64, "concurrent agents in the throughput run")
	pending := fs.Int("pending", 100000, "concurrent waits in the pending-capacity run (0 skips it)")
	dir := fs.String("dir", "", "store directory (a temporary one by default)")
	jsonOut := fs.Bool("json", false, "print the report as JSON")
	if err := fs.Parse(args); err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	cfg := bench.Config{Dir: *dir, Sync: *syncMode, Duration: *duration, Concurrency: *concurrency, Pending: *pending, Out: out}
	if *jsonOut {
		cfg.Out = io.Discard
	}
	rep, err := bench.Run(ctx, cfg)
	if err != nil {
		return err
	}
	if *jsonOut {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	return nil
}
