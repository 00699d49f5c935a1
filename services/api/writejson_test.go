package api

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestAnswersAreNotHTMLEscaped: a "<", ">" or "&" in what an answer holds
// (arguments, comments) reaches clients as written, not as \u003c.
func TestAnswersAreNotHTMLEscaped(t *testing.T) {
	w := httptest.NewRecorder()
	writeJSON(w, http.StatusOK, map[string]any{"arguments": json.RawMessage(`{"q":"a<b && c>d"}`), "comment": "x < y"})
	body := w.Body.String()
	if strings.Contains(body, `\u003c`) || !strings.Contains(body, `"q":"a<b && c>d"`) || !strings.Contains(body, `"comment":"x < y"`) {
		t.Errorf("answer %q: want the characters as written", body)
	}
	if !strings.HasSuffix(body, "}\n") || strings.HasSuffix(body, "\n\n") {
		t.Errorf("answer %q: want one JSON value and one newline", body)
	}
}
