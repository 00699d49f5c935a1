package mcpgateway

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"log/slog"
	"time"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/contracts/client"
)

// reportTimeout bounds the report of a claimed call's outcome.
const reportTimeout = 10 * time.Second

// reportOutcome tells Countersign how the claimed call eventID ended, once
// (the report's id is derived from the approval, so a retried report is
// one): failed when the upstream failed or answered an error result,
// else succeeded, with the SHA-256 of the result's content. A report that
// cannot be made is logged; the approval stays "claimed, no outcome".
func (g *Gateway) reportOutcome(ctx context.Context, eventID string, out *mcp.CallToolResult, callErr error) {
	o := client.Outcome{Status: client.Succeeded}
	switch {
	case callErr != nil:
		o.Status, o.Summary = client.Failed, truncate("the upstream MCP server failed during the call: "+callErr.Error())
	case out != nil && out.IsError:
		o.Status, o.Summary = client.Failed, truncate("the tool answered an error: "+firstText(out))
	}
	if out != nil {
		if data, err := json.Marshal(out.Content); err == nil {
			sum := sha256.Sum256(data)
			o.ResultSHA256 = hex.EncodeToString(sum[:])
		}
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), reportTimeout)
	defer cancel()
	if err := g.cfg.Countersign.Report(ctx, eventID, "outcome-"+eventID, o); err != nil {
		g.cfg.Logger.Warn("the outcome of a claimed call was not reported", slog.String("event_id", eventID), slog.String("err", err.Error()))
	}
}

func firstText(out *mcp.CallToolResult) string {
	for _, c := range out.Content {
		if t, ok := c.(*mcp.TextContent); ok {
			return t.Text
		}
	}
	return ""
}

// truncate cuts s to the summary's limit on a character boundary.
func truncate(s string) string {
	n := contracts.MaxExecutionSummaryBytes
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
