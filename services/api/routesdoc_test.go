package api

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestHTTPAPIDocListsEveryRoute: docs/http-api.md's route table names every
// route the server registers, and no route it does not register. A cell
// may shorten siblings and children: "`POST /v1/approvals/{event_id}/cancel`,
// `/extend`" names .../extend, "`GET /v1/grants/{grant_id}`, `/events`"
// names .../{grant_id}/events, with the same method.
func TestHTTPAPIDocListsEveryRoute(t *testing.T) {
	src, err := os.ReadFile("server.go")
	if err != nil {
		t.Fatal(err)
	}
	var registered []string
	for _, m := range regexp.MustCompile(`mux\.Handle(?:Func)?\("([A-Z]+ /[^"]*)"`).FindAllStringSubmatch(string(src), -1) {
		registered = append(registered, m[1])
	}
	if len(registered) < 20 {
		t.Fatalf("found %d routes in server.go; the pattern no longer reads them", len(registered))
	}
	doc, err := os.ReadFile("../../docs/http-api.md")
	if err != nil {
		t.Fatal(err)
	}
	documented := map[string]bool{}
	code := regexp.MustCompile("`([^`]+)`")
	for _, line := range strings.Split(string(doc), "\n") {
		if !strings.HasPrefix(line, "| `") {
			continue
		}
		cell := strings.SplitN(line, "|", 3)[1]
		method, last := "", ""
		for _, m := range code.FindAllStringSubmatch(cell, -1) {
			w := m[1]
			if i := strings.IndexAny(w, "[?"); i >= 0 {
				w = w[:i]
			}
			if m, path, ok := strings.Cut(w, " "); ok {
				method, last = m, path
			} else if strings.HasPrefix(w, "/") && last != "" {
				if strings.HasSuffix(last, "}") { // below a {param}: a child
					last += w
				} else { // a sibling
					last = last[:strings.LastIndex(last, "/")] + w
				}
			} else {
				continue
			}
			documented[method+" "+last] = true
		}
	}
	for _, r := range registered {
		if !documented[r] {
			t.Errorf("docs/http-api.md does not list %s", r)
		}
	}
	for r := range documented {
		if !slices.Contains(registered, r) {
			t.Errorf("docs/http-api.md lists %s, which the server does not serve", r)
		}
	}
}
