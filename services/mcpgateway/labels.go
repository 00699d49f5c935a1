package mcpgateway

import (
	"strconv"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Run labels the gateway adds to every review, for policy rules to match
// (labels: {mcp.readOnlyHint: "true"}) and conditions to read
// (labels["mcp.destructiveHint"] == "true").
const (
	LabelServer      = "mcp.server"
	LabelTool        = "mcp.tool"
	LabelReadOnly    = "mcp.readOnlyHint"
	LabelDestructive = "mcp.destructiveHint"
	LabelIdempotent  = "mcp.idempotentHint"
	LabelOpenWorld   = "mcp.openWorldHint"
	// LabelKind says what is reviewed: KindToolCall, or KindQuestion for
	// an upstream's question that went to the approvers.
	LabelKind = "mcp.kind"
)

// Values of LabelKind.
const (
	KindToolCall = "tool_call"
	KindQuestion = "question"
)

// Labels returns the run labels of a call to tool on server. The hints are
// "true" or "false", with the MCP specification's defaults where the tool
// does not say (or is unknown): readOnlyHint false, destructiveHint true,
// idempotentHint false, openWorldHint true. destructiveHint is false for a
// read-only tool, as the specification makes it meaningful only for tools
// that are not. Annotations are the upstream's claims: trust them as far as
// you trust that server.
func Labels(server string, tool *mcp.Tool) map[string]string {
	readOnly, destructive, idempotent, openWorld := false, true, false, true
	name := ""
	if tool != nil {
		name = tool.Name
		if a := tool.Annotations; a != nil {
			readOnly, idempotent = a.ReadOnlyHint, a.IdempotentHint
			if a.DestructiveHint != nil {
				destructive = *a.DestructiveHint
			}
			if a.OpenWorldHint != nil {
				openWorld = *a.OpenWorldHint
			}
		}
	}
	if readOnly {
		destructive = false
	}
	return map[string]string{
		LabelKind:        KindToolCall,
		LabelServer:      server,
		LabelTool:        name,
		LabelReadOnly:    strconv.FormatBool(readOnly),
		LabelDestructive: strconv.FormatBool(destructive),
		LabelIdempotent:  strconv.FormatBool(idempotent),
		LabelOpenWorld:   strconv.FormatBool(openWorld),
	}
}

// QuestionLabels returns the run labels of a question the upstream server
// asked (an elicitation) that goes to the approvers: it is a question, not
// a tool call, so it carries no tool hints — only the server and the tool
// whose call asked it ("" when that is not known).
func QuestionLabels(server, tool string) map[string]string {
	return map[string]string{LabelKind: KindQuestion, LabelServer: server, LabelTool: tool}
}
