package bench

import (
	"math"
	"slices"
	"time"
)

// Dist summarizes latency samples, in milliseconds.
type Dist struct {
	N    int     `json:"n"`
	P50  float64 `json:"p50_ms"`
	P99  float64 `json:"p99_ms"`
	Max  float64 `json:"max_ms"`
	Mean float64 `json:"mean_ms"`
}

// summarize sorts samples in place and returns their distribution.
func summarize(samples []time.Duration) Dist {
	if len(samples) == 0 {
		return Dist{}
	}
	slices.Sort(samples)
	var sum time.Duration
	for _, s := range samples {
		sum += s
	}
	return Dist{
		N:    len(samples),
		P50:  ms(percentile(samples, 0.50)),
		P99:  ms(percentile(samples, 0.99)),
		Max:  ms(samples[len(samples)-1]),
		Mean: ms(sum / time.Duration(len(samples))),
	}
}

// percentile is the nearest-rank percentile of sorted samples.
func percentile(sorted []time.Duration, p float64) time.Duration {
	i := int(math.Ceil(p*float64(len(sorted)))) - 1
	return sorted[max(0, min(i, len(sorted)-1))]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// ratio is a/b, or 0 when b is 0.
func ratio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}

// median is the median of xs (the mean of the middle two for an even
// count), or 0 for none. It does not modify xs.
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// medians returns, for each sync mode in runs (in order of first
// appearance), a ModeReport whose every figure is the median of that
// figure over the mode's repetitions. Ratios are the medians of the ratios
// measured within each repetition; error counts are summed.
func medians(runs []ModeReport) []ModeReport {
	var out []ModeReport
	for _, r := range runs {
		if slices.ContainsFunc(out, func(m ModeReport) bool { return m.Sync == r.Sync }) {
			continue
		}
		var reps []ModeReport
		for _, x := range runs {
			if x.Sync == r.Sync {
				reps = append(reps, x)
			}
		}
		out = append(out, medianMode(reps))
	}
	return out
}

func medianMode(reps []ModeReport) ModeReport {
	med := func(f func(m *ModeReport) float64) float64 {
		xs := make([]float64, len(reps))
		for i := range reps {
			xs[i] = f(&reps[i])
		}
		return median(xs)
	}
	medDist := func(f func(m *ModeReport) *Dist) Dist {
		return Dist{
			N:    int(med(func(m *ModeReport) float64 { return float64(f(m).N) })),
			P50:  med(func(m *ModeReport) float64 { return f(m).P50 }),
			P99:  med(func(m *ModeReport) float64 { return f(m).P99 }),
			Max:  med(func(m *ModeReport) float64 { return f(m).Max }),
			Mean: med(func(m *ModeReport) float64 { return f(m).Mean }),
		}
	}
	first := reps[0]
	out := ModeReport{Sync: first.Sync, Repetitions: len(reps), GoProcs: first.GoProcs}
	out.Raw = RawReport{
		SyncPublishPerSec:  med(func(m *ModeReport) float64 { return m.Raw.SyncPublishPerSec }),
		SyncPublish:        medDist(func(m *ModeReport) *Dist { return &m.Raw.SyncPublish }),
		AsyncPublishPerSec: med(func(m *ModeReport) float64 { return m.Raw.AsyncPublishPerSec }),
		AsyncWindow:        first.Raw.AsyncWindow,
		KVPutWatch:         medDist(func(m *ModeReport) *Dist { return &m.Raw.KVPutWatch }),
		KVPutsPerSec:       med(func(m *ModeReport) float64 { return m.Raw.KVPutsPerSec }),
		FloorCyclesPerSec:  med(func(m *ModeReport) float64 { return m.Raw.FloorCyclesPerSec }),
	}
	out.Cycles = CycleReport{
		Agents:           first.Cycles.Agents,
		Completed:        int(med(func(m *ModeReport) float64 { return float64(m.Cycles.Completed) })),
		Seconds:          first.Cycles.Seconds,
		PerSec:           med(func(m *ModeReport) float64 { return m.Cycles.PerSec }),
		FloorRatio:       med(func(m *ModeReport) float64 { return m.Cycles.FloorRatio }),
		SyncPublishRatio: med(func(m *ModeReport) float64 { return m.Cycles.SyncPublishRatio }),
		Latency:          medDist(func(m *ModeReport) *Dist { return &m.Cycles.Latency }),
	}
	out.Latency = LatencyReport{
		Latency:           medDist(func(m *ModeReport) *Dist { return &m.Latency.Latency }),
		KVPutWatchP50:     med(func(m *ModeReport) float64 { return m.Latency.KVPutWatchP50 }),
		RatioToKVPutWatch: med(func(m *ModeReport) float64 { return m.Latency.RatioToKVPutWatch }),
	}
	for _, m := range reps {
		out.Cycles.Errors += m.Cycles.Errors
		out.Cycles.VoteErrors += m.Cycles.VoteErrors
		out.Latency.Errors += m.Latency.Errors
		if out.Cycles.FirstError == "" {
			out.Cycles.FirstError = m.Cycles.FirstError
		}
		if out.Latency.FirstError == "" {
			out.Latency.FirstError = m.Latency.FirstError
		}
	}
	return out
}
