package main

import (
	"fmt"
	"io"
	"runtime"
	"strings"
	"text/tabwriter"
	"time"
)

// Countersign's sync modes, as services/bench names them.
const (
	modeAlways = "always"
	modeLazy   = "lazy"
)

// fsyncTarget is the burst ratio the product aims for with fsync on.
const fsyncTarget = 10.0

func printRepetition(out io.Writer, i, n int, r repetition) {
	if r.err != nil {
		fmt.Fprintf(out, "repetition %d/%d FAILED (left out of the medians): %v\n", i, n, r.err)
		return
	}
	t := r.temporal
	fmt.Fprintf(out, "repetition %d/%d: Temporal resume p50 %.2f ms p99 %.2f ms (n=%d), result p50 %.2f ms, %.1f cycles/s (%d in %.0f s, cycle p50 %.0f ms, warm-up %.0f ms)",
		i, n, t.Resume.P50, t.Resume.P99, t.Resume.N, t.Result.P50, t.PerSec, t.Cycles, t.Seconds, t.Cycle.P50, t.WarmUpMs)
	for _, m := range []string{modeAlways, modeLazy} {
		if c, ok := r.countersign[m]; ok {
			fmt.Fprintf(out, "; Countersign %s p50 %.2f ms p99 %.2f ms (n=%d), %.1f cycles/s",
				m, c.Resume.P50, c.Resume.P99, c.Resume.N, c.PerSec)
		}
	}
	fmt.Fprintln(out)
}

// column is one system's figures over the good repetitions, each paired
// with Temporal's figures of the same repetition.
type column struct {
	name                string
	p50, p99, perSec    []float64
	cycleP50            []float64
	resultP50           []float64 // Temporal only
	p50x, p99x, perSecx []float64 // ratios within each repetition
}

func (c *column) add(f, t figures) {
	c.p50 = append(c.p50, f.Resume.P50)
	c.p99 = append(c.p99, f.Resume.P99)
	c.perSec = append(c.perSec, f.PerSec)
	c.cycleP50 = append(c.cycleP50, f.Cycle.P50)
	c.p50x = append(c.p50x, ratio(t.Resume.P50, f.Resume.P50))
	c.p99x = append(c.p99x, ratio(t.Resume.P99, f.Resume.P99))
	c.perSecx = append(c.perSecx, ratio(f.PerSec, t.PerSec))
}

func columns(cfg config, reps []repetition) (cols []*column, good int) {
	always := &column{name: "Countersign, fsync"}
	lazy := &column{name: "Countersign, lazy"}
	temporal := &column{name: "Temporal dev, fsync"}
	for _, r := range reps {
		if r.err != nil {
			continue
		}
		good++
		always.add(r.countersign[modeAlways], r.temporal)
		temporal.add(r.temporal, r.temporal)
		temporal.resultP50 = append(temporal.resultP50, r.temporal.Result.P50)
		if cfg.lazy {
			lazy.add(r.countersign[modeLazy], r.temporal)
		}
	}
	cols = []*column{always}
	if cfg.lazy {
		cols = append(cols, lazy)
	}
	return append(cols, temporal), good
}

func cell(xs []float64, format string) string {
	s := spreadOf(xs)
	if s.N == 1 {
		return fmt.Sprintf(format, s.Median)
	}
	return fmt.Sprintf(format+" ["+format+"–"+format+"]", s.Median, s.Min, s.Max)
}

// printTable prints the side-by-side table over the good repetitions; it
// fails if none was.
func printTable(out io.Writer, cfg config, reps []repetition, elapsed time.Duration) error {
	cols, good := columns(cfg, reps)
	fmt.Fprintf(out, "\nPeers in the same run: %d of %d repetitions good, %d CPUs, %s, %s; median [min–max]\n",
		good, len(reps), runtime.NumCPU(), runtime.Version(), elapsed.Round(time.Second))
	if good == 0 {
		return fmt.Errorf("no repetition completed")
	}
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	row := func(label string, f func(c *column) string) {
		cells := []string{label}
		for _, c := range cols {
			cells = append(cells, f(c))
		}
		fmt.Fprintln(tw, strings.Join(cells, "\t"))
	}
	row("", func(c *column) string { return c.name })
	row("resume p50, ms (one at a time)", func(c *column) string { return cell(c.p50, "%.2f") })
	row("resume p99, ms", func(c *column) string { return cell(c.p99, "%.2f") })
	row("signal → result at the starter, p50, ms", func(c *column) string {
		if c.resultP50 == nil {
			return "—"
		}
		return cell(c.resultP50, "%.2f")
	})
	row(fmt.Sprintf("cycles/s, %d agents", cfg.agents), func(c *column) string { return cell(c.perSec, "%.0f") })
	row("full cycle in the burst, p50, ms", func(c *column) string { return cell(c.cycleP50, "%.0f") })
	ratioRow := func(label string, xs func(c *column) []float64) {
		row(label, func(c *column) string {
			if c.name == cols[len(cols)-1].name {
				return "1×"
			}
			return cell(xs(c), "%.1f") + "×"
		})
	}
	ratioRow("resume p50: Temporal ÷ this", func(c *column) []float64 { return c.p50x })
	ratioRow("resume p99: Temporal ÷ this", func(c *column) []float64 { return c.p99x })
	ratioRow("cycles/s: this ÷ Temporal", func(c *column) []float64 { return c.perSecx })
	if err := tw.Flush(); err != nil {
		return err
	}
	verdict := "MISS"
	if m := spreadOf(cols[0].perSecx).Median; m >= fsyncTarget {
		verdict = "PASS"
	}
	fmt.Fprintf(out, "target: Countersign with fsync ≥ %.0f× the Temporal dev server's burst cycles/s: %s\n", fsyncTarget, verdict)
	fmt.Fprintln(out, "ratios are taken within each repetition (same run, same machine), then the median")
	return nil
}
