package inbox

import (
	"fmt"
	"math"
	"strconv"
)

// Chart geometry, in SVG user units (the charts scale to their container's
// width through the viewBox).
const (
	chartWidth = 760
	labelRight = 150 // labels end here
	plotLeft   = 160
	plotRight  = 560 // a bar's value is written to its right
	rowHeight  = 30
	chartTop   = 28 // room for the axis labels
	barHeight  = 16
)

// charts are the three charts of one breakdown (by approver or by rule).
type charts struct {
	Decisions, Fast barChart
	Times           boxChart
}

type barChart struct {
	ID, Title, Desc string
	Width, Height   int
	Rows            []barRow
	Legend          []legendKey
}

// legendKey names what a colour (a key-* class) stands for.
type legendKey struct{ Class, Label string }

type barRow struct {
	Name           string
	LabelY, BarY   int
	Segments       []segment
	ValueX, Value  string
	Flag           bool
	BarH, TrackW   int
	TrackX, TrackY string
}

type segment struct {
	Class, X, W, Tip string
}

type boxChart struct {
	ID, Title, Desc string
	Width, Height   int
	Rows            []boxRow
	Ticks           []tick
	AxisY, Bottom   int
	// Threshold marks the fast-decision threshold.
	ThresholdX, ThresholdLabel string
}

type boxRow struct {
	Name                                  string
	LabelY, Top, Mid, Bot                 int
	Min, P25, Median, P75, P90, Max, BoxW string
	Tip                                   string
	Flag                                  bool
}

type tick struct {
	X, Label string
}

func coord(f float64) string { return strconv.FormatFloat(math.Round(f*10)/10, 'f', -1, 64) }

// chartsOf draws the charts of rows; id prefixes the charts' ids.
func chartsOf(id string, rows []figures, fast float64) charts {
	return charts{
		Decisions: decisionsChart(id+"-decisions", rows),
		Times:     timesChart(id+"-times", rows, fast),
		Fast:      fastChart(id+"-fast", rows, fast),
	}
}

// decisionsChart stacks each row's decisions (approved, rejected, other)
// and then its requests that expired undecided.
func decisionsChart(id string, rows []figures) barChart {
	c := barChart{ID: id, Title: "Decisions", Desc: "Approved, rejected and other decisions, then requests that expired undecided.", Width: chartWidth,
		Legend: []legendKey{{"key-approved", "approved or edited"}, {"key-rejected", "rejected"}, {"key-other", "responded or answered"}, {"key-expired", "expired undecided"}}}
	most := 1
	for _, r := range rows {
		most = max(most, r.Decisions+r.Expired)
	}
	scale := float64(plotRight-plotLeft) / float64(most)
	for i, r := range rows {
		y := chartTop + i*rowHeight
		br := barRow{Name: r.Name, LabelY: y + barHeight - 3, BarY: y, BarH: barHeight}
		x := float64(plotLeft)
		for _, s := range []struct {
			class string
			n     int
			what  string
		}{
			{"seg-approved", r.Approved, "approved"}, {"seg-rejected", r.Rejected, "rejected"},
			{"seg-other", r.Other, "responded or answered"}, {"seg-expired", r.Expired, "expired undecided"},
		} {
			if s.n == 0 {
				continue
			}
			w := float64(s.n) * scale
			br.Segments = append(br.Segments, segment{Class: s.class, X: coord(x), W: coord(w), Tip: fmt.Sprintf("%s: %d %s", r.Name, s.n, s.what)})
			x += w
		}
		br.ValueX = coord(x + 6)
		br.Value = fmt.Sprintf("%d", r.Decisions)
		if r.Rate != "–" {
			br.Value += " · " + r.Rate + " approved"
		}
		if r.Expired > 0 {
			br.Value += fmt.Sprintf(" · %d expired", r.Expired)
		}
		c.Rows = append(c.Rows, br)
	}
	c.Height = chartTop + len(rows)*rowHeight
	return c
}

// fastChart shows, for each row with decisions on high and critical risk,
// the share of them made faster than the threshold.
func fastChart(id string, rows []figures, fast float64) barChart {
	c := barChart{ID: id, Title: "Fast decisions on high and critical risk",
		Desc: "Share of decisions on high and critical risk requests made in under " + seconds(fast) + ".", Width: chartWidth}
	width := float64(plotRight - plotLeft)
	for _, r := range rows {
		if !r.HasHighRisks {
			continue
		}
		y := chartTop + len(c.Rows)*rowHeight
		share := float64(r.Fast) / float64(r.HighRisk)
		br := barRow{Name: r.Name, LabelY: y + barHeight - 3, BarY: y, BarH: barHeight, Flag: r.FastFlag,
			TrackX: coord(plotLeft), TrackY: strconv.Itoa(y), TrackW: plotRight - plotLeft}
		if r.Fast > 0 {
			class := "seg-fast"
			if r.FastFlag {
				class += " flagged"
			}
			br.Segments = []segment{{Class: class, X: coord(plotLeft), W: coord(share * width), Tip: fmt.Sprintf("%s: %d of %d under %s", r.Name, r.Fast, r.HighRisk, seconds(fast))}}
		}
		br.ValueX = coord(plotRight + 6)
		br.Value = fmt.Sprintf("%d of %d · %s", r.Fast, r.HighRisk, r.FastShare)
		c.Rows = append(c.Rows, br)
	}
	c.Height = chartTop + len(c.Rows)*rowHeight
	return c
}

// logTicks are the time axis' candidate ticks, in seconds.
var logTicks = []struct {
	s     float64
	label string
}{
	{1, "1s"}, {10, "10s"}, {60, "1m"}, {600, "10m"}, {3600, "1h"}, {6 * 3600, "6h"}, {86400, "1d"}, {7 * 86400, "7d"}, {30 * 86400, "30d"},
}

// timesChart draws a box plot of each row's times to decide on a log
// scale: whiskers from the fastest to the slowest, the box from p25 to
// p75, a bar at the median and a tick at p90.
func timesChart(id string, rows []figures, fast float64) boxChart {
	c := boxChart{ID: id, Title: "Time to decide", Width: chartWidth,
		Desc: "From the fastest to the slowest decision; the box spans the middle half, the bar is the median, the tick p90. Log scale."}
	hi := max(fast, 60)
	for _, r := range rows {
		if r.TimeToDecide != nil {
			hi = max(hi, r.TimeToDecide.Max)
		}
	}
	lo, top := 1.0, logTicks[len(logTicks)-1].s
	for _, t := range logTicks {
		if t.s >= hi {
			top = t.s
			break
		}
	}
	x := func(s float64) float64 {
		s = min(max(s, lo), top)
		return plotLeft + (math.Log(s)-math.Log(lo))/(math.Log(top)-math.Log(lo))*float64(plotRight+150-plotLeft)
	}
	for _, t := range logTicks {
		if t.s <= top {
			c.Ticks = append(c.Ticks, tick{X: coord(x(t.s)), Label: t.label})
		}
	}
	c.ThresholdX, c.ThresholdLabel = coord(x(fast)), "fast < "+seconds(fast)
	for _, r := range rows {
		p := r.TimeToDecide
		if p == nil {
			continue
		}
		y := chartTop + len(c.Rows)*rowHeight
		c.Rows = append(c.Rows, boxRow{
			Name: r.Name, LabelY: y + barHeight - 3, Top: y, Mid: y + barHeight/2, Bot: y + barHeight,
			Min: coord(x(p.Min)), P25: coord(x(p.P25)), Median: coord(x(p.Median)), P75: coord(x(p.P75)), P90: coord(x(p.P90)), Max: coord(x(p.Max)),
			BoxW: coord(max(x(p.P75)-x(p.P25), 1)), Flag: r.FastFlag,
			Tip: fmt.Sprintf("%s: %d decisions; fastest %s, median %s, p90 %s, slowest %s", r.Name, r.Decisions, seconds(p.Min), seconds(p.Median), seconds(p.P90), seconds(p.Max)),
		})
	}
	c.AxisY = chartTop - 10
	c.Bottom = chartTop + len(c.Rows)*rowHeight
	c.Height = c.Bottom + 4
	return c
}
