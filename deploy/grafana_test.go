package deploy_test

import (
	"encoding/json"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// exporterMetrics are the NATS exporter's metrics the dashboard uses
// (prometheus-nats-exporter with -jsz=all, the NATS Helm chart's
// promExporter); deploy/README.md documents them.
var exporterMetrics = []string{"jetstream_consumer_num_pending", "jetstream_consumer_num_ack_pending"}

// codeMetrics scans the Go sources (tests excluded) for the metric names
// Countersign registers: Name: "countersign_..." or prometheus.NewDesc("countersign_...").
func codeMetrics(t *testing.T) map[string]bool {
	t.Helper()
	re := regexp.MustCompile(`(?:Name:\s*|prometheus.NewDesc\(|d\()"(countersign_[a-z0-9_]+)"`)
	names := map[string]bool{}
	err := filepath.WalkDir("..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (strings.HasPrefix(d.Name(), ".") || d.Name() == "node_modules") && path != ".." {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range re.FindAllStringSubmatch(string(src), -1) {
			names[m[1]] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// A scan that finds nothing would make every check below pass.
	for _, must := range []string{"countersign_pending_approvals", "countersign_decisions_total", "countersign_http_requests_total"} {
		if !names[must] {
			t.Fatalf("the source scan found no %s (found %d names): the scan is broken", must, len(names))
		}
	}
	return names
}

// dashboardExprs returns every PromQL expression of the dashboard: panel
// targets and template variable queries.
func dashboardExprs(t *testing.T, path string) []string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var d map[string]any
	if err := json.Unmarshal(data, &d); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	var exprs []string
	var walkPanels func(ps []any)
	walkPanels = func(ps []any) {
		for _, p := range ps {
			for _, tg := range list(p, "targets") {
				if e := str(tg, "expr"); e != "" {
					exprs = append(exprs, e)
				} else {
					t.Errorf("%s: panel %q has a target without expr", path, str(p, "title"))
				}
			}
			walkPanels(list(p, "panels"))
		}
	}
	walkPanels(list(d, "panels"))
	for _, v := range list(d, "templating", "list") {
		if str(v, "type") == "query" {
			exprs = append(exprs, str(v, "query"))
		}
	}
	return exprs
}

// metricRef matches metric names in PromQL: identifiers of our namespaces.
var metricRef = regexp.MustCompile(`\b((?:countersign|jetstream|nats|gnatsd)_[a-zA-Z0-9_]+)`)

// histogramSeries strips the series suffixes of a histogram.
func histogramBase(name string, known map[string]bool) string {
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		if b, ok := strings.CutSuffix(name, suffix); ok && known[b] {
			return b
		}
	}
	return name
}

// unknownMetrics returns the metric names in exprs that are neither in
// known nor exporter metrics, and the known ones used.
func unknownMetrics(exprs []string, known map[string]bool) (unknown []string, used map[string]bool) {
	used = map[string]bool{}
	for _, e := range exprs {
		for _, m := range metricRef.FindAllStringSubmatch(e, -1) {
			name := histogramBase(m[1], known)
			switch {
			case known[name]:
				used[name] = true
			case slices.Contains(exporterMetrics, name):
			default:
				unknown = append(unknown, name)
			}
		}
	}
	return unknown, used
}

func TestDashboardUsesExportedMetrics(t *testing.T) {
	known := codeMetrics(t)
	path := "grafana/countersign-dashboard.json"
	exprs := dashboardExprs(t, path)
	if len(exprs) < len(known) {
		t.Fatalf("%s: %d expressions for %d metrics", path, len(exprs), len(known))
	}
	unknown, used := unknownMetrics(exprs, known)
	for _, m := range unknown {
		t.Errorf("%s: %s is not a metric the code exports (nor a documented NATS exporter metric)", path, m)
	}
	// Every metric the code exports has a panel, so a new one is not
	// forgotten.
	for m := range known {
		if !used[m] {
			t.Errorf("%s: no panel shows %s", path, m)
		}
	}
}

func TestDashboardCheckFindsUnknownMetrics(t *testing.T) {
	known := map[string]bool{"countersign_decision_latency_seconds": true}
	unknown, used := unknownMetrics([]string{
		`histogram_quantile(0.5, rate(countersign_decision_latency_seconds_bucket[5m]))`,
		`rate(countersign_decisions_totl[5m]) + jetstream_consumer_num_pending`,
	}, known)
	if !slices.Equal(unknown, []string{"countersign_decisions_totl"}) || !used["countersign_decision_latency_seconds"] {
		t.Errorf("unknown %q, used %v", unknown, used)
	}
}
