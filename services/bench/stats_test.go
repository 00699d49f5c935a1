package bench

import "testing"

func TestMedian(t *testing.T) {
	for _, tc := range []struct {
		in   []float64
		want float64
	}{
		{nil, 0},
		{[]float64{3}, 3},
		{[]float64{5, 1, 3}, 3},
		{[]float64{4, 1, 3, 2}, 2.5},
	} {
		in := append([]float64(nil), tc.in...)
		if got := median(in); got != tc.want {
			t.Errorf("median(%v) = %v, want %v", tc.in, got, tc.want)
		}
		for i := range in {
			if in[i] != tc.in[i] {
				t.Errorf("median reordered its input: %v", in)
			}
		}
	}
}

func TestMediansPerMode(t *testing.T) {
	run := func(mode string, rep int, perSec, ratio, p99 float64, errs int) ModeReport {
		m := ModeReport{Sync: mode, Repetition: rep}
		m.Cycles.PerSec, m.Cycles.FloorRatio, m.Cycles.Errors = perSec, ratio, errs
		m.Latency.Latency.P99 = p99
		return m
	}
	got := medians([]ModeReport{
		run(SyncLazy, 1, 100, 0.1, 9, 1), run(SyncAlways, 1, 10, 0.5, 3, 0),
		run(SyncLazy, 2, 300, 0.3, 1, 0), run(SyncAlways, 2, 30, 0.7, 2, 0),
		run(SyncLazy, 3, 200, 0.2, 5, 2), run(SyncAlways, 3, 20, 0.6, 1, 0),
	})
	if len(got) != 2 || got[0].Sync != SyncLazy || got[1].Sync != SyncAlways {
		t.Fatalf("modes: %+v", got)
	}
	l, a := got[0], got[1]
	if l.Repetitions != 3 || l.Cycles.PerSec != 200 || l.Cycles.FloorRatio != 0.2 || l.Latency.Latency.P99 != 5 || l.Cycles.Errors != 3 {
		t.Errorf("lazy medians: %+v", l)
	}
	if a.Cycles.PerSec != 20 || a.Cycles.FloorRatio != 0.6 || a.Latency.Latency.P99 != 2 {
		t.Errorf("always medians: %+v", a)
	}
}
