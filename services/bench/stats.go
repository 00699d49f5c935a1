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
