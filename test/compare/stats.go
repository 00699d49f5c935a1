package main

import (
	"math"
	"slices"
	"time"
)

// latency summarizes one repetition's resume latencies, in milliseconds.
type latency struct {
	N   int
	P50 float64
	P99 float64
}

// summarize sorts samples in place and returns their nearest-rank p50 and
// p99.
func summarize(samples []time.Duration) latency {
	if len(samples) == 0 {
		return latency{}
	}
	slices.Sort(samples)
	return latency{N: len(samples), P50: ms(rank(samples, 0.50)), P99: ms(rank(samples, 0.99))}
}

func rank(sorted []time.Duration, p float64) time.Duration {
	i := int(math.Ceil(p*float64(len(sorted)))) - 1
	return sorted[max(0, min(i, len(sorted)-1))]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// spread is the median of a figure over the repetitions, with its range.
type spread struct {
	N        int
	Median   float64
	Min, Max float64
}

// spreadOf returns the median (the mean of the middle two for an even
// count) and range of xs, which it does not modify.
func spreadOf(xs []float64) spread {
	if len(xs) == 0 {
		return spread{}
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	m := s[len(s)/2]
	if len(s)%2 == 0 {
		m = (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return spread{N: len(s), Median: m, Min: s[0], Max: s[len(s)-1]}
}

// ratio is a/b, or 0 when b is 0.
func ratio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}
