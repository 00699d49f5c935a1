package slacktest

import (
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"net/http"
	"sort"
	"strconv"
	"strings"
)

// argKind is the JSON type of a method argument.
type argKind int

const (
	argString argKind = iota
	argBool
	argArray
	argObject
)

// methodArgs are the arguments each method accepts (Slack's documented
// ones); any other is refused as invalid_arguments.
var methodArgs = map[string]map[string]argKind{
	"chat.postMessage": {
		"channel": argString, "text": argString, "blocks": argArray, "attachments": argArray,
		"as_user": argBool, "icon_emoji": argString, "icon_url": argString, "link_names": argBool,
		"markdown_text": argString, "metadata": argObject, "mrkdwn": argBool, "parse": argString,
		"reply_broadcast": argBool, "thread_ts": argString, "unfurl_links": argBool,
		"unfurl_media": argBool, "username": argString,
	},
	"chat.update": {
		"channel": argString, "ts": argString, "text": argString, "blocks": argArray,
		"attachments": argArray, "as_user": argBool, "file_ids": argArray, "link_names": argBool,
		"markdown_text": argString, "metadata": argObject, "parse": argString, "reply_broadcast": argBool,
	},
	"views.open": {
		"trigger_id": argString, "interactivity_pointer": argString, "view": argObject,
	},
}

// apiReply is one answer of the fake.
type apiReply struct {
	status   int
	header   http.Header
	body     map[string]any
	raw      string // a non-JSON body, for injected failures
	code     string
	messages []string
	warnings []string
	injected bool
}

func okReply(fields map[string]any) *apiReply {
	body := map[string]any{"ok": true}
	for k, v := range fields {
		body[k] = v
	}
	return &apiReply{body: body}
}

func errReply(code string, messages ...string) *apiReply {
	body := map[string]any{"ok": false, "error": code}
	if len(messages) > 0 {
		body["response_metadata"] = map[string]any{"messages": messages}
	}
	return &apiReply{body: body, code: code, messages: messages}
}

func (s *Server) serveAPI(w http.ResponseWriter, r *http.Request) {
	method := r.PathValue("method")
	body, _ := io.ReadAll(io.LimitReader(r.Body, 10<<20))

	s.mu.Lock()
	rep := s.apiLocked(method, r, body)
	call := Call{Method: method, Body: body, Error: rep.code, Messages: rep.messages, Warnings: rep.warnings, Injected: rep.injected}
	channel, _ := rep.body["channel"].(string)
	ts, _ := rep.body["ts"].(string)
	if call.Error == "" && channel != "" && ts != "" {
		call.Ref = messageKey(channel, ts)
	}
	s.calls = append(s.calls, call)
	if call.Error != "" && !call.Injected {
		s.refused = append(s.refused, call)
	}
	s.changedLocked()
	s.mu.Unlock()

	for k, vs := range rep.header {
		for _, v := range vs {
			w.Header().Add(k, v)
		}
	}
	status := rep.status
	if status == 0 {
		status = http.StatusOK
	}
	if rep.raw != "" || rep.body == nil {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.WriteHeader(status)
		_, _ = io.WriteString(w, rep.raw)
		return
	}
	if len(rep.warnings) > 0 {
		rep.body["warning"] = strings.Join(rep.warnings, ",")
		rep.body["response_metadata"] = map[string]any{"warnings": rep.warnings}
	}
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(rep.body)
}

func (s *Server) apiLocked(method string, r *http.Request, body []byte) *apiReply {
	if q := s.failures[method]; len(q) > 0 {
		f := q[0]
		s.failures[method] = q[1:]
		rep := &apiReply{status: f.status, header: http.Header{}, injected: true, code: f.code}
		if f.retryAfter != "" {
			rep.header.Set("Retry-After", f.retryAfter)
		}
		if f.code != "" {
			rep.body = map[string]any{"ok": false, "error": f.code}
		} else {
			rep.raw = http.StatusText(max(f.status, 200))
			rep.code = "http_" + strconv.Itoa(max(f.status, 200))
		}
		return rep
	}
	spec, known := methodArgs[method]
	if !known {
		return errReply("unknown_method")
	}
	if r.Method != http.MethodPost {
		rep := errReply("invalid_request", "[ERROR] the fake takes POST only")
		rep.status = http.StatusMethodNotAllowed
		return rep
	}
	switch auth := r.Header.Get("Authorization"); {
	case auth == "":
		return errReply("not_authed")
	case auth != "Bearer "+s.token:
		return errReply("invalid_auth")
	}
	var warnings []string
	mediaType, params, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil || mediaType != "application/json" {
		return errReply(errInvalidArgs, "[ERROR] the fake takes JSON bodies only (Content-Type: application/json; charset=utf-8)")
	}
	if cs := params["charset"]; cs == "" {
		warnings = append(warnings, "missing_charset")
	} else if !strings.EqualFold(cs, "utf-8") {
		warnings = append(warnings, "superfluous_charset")
	}
	v, err := decodeJSON(body)
	if err != nil {
		return errReply(errInvalidJSON)
	}
	args, ok := v.(map[string]any)
	if !ok {
		return errReply(errJSONNotObject)
	}
	if msgs := checkArgs(args, spec); len(msgs) > 0 {
		return errReply(errInvalidArgs, msgs...)
	}
	var rep *apiReply
	switch method {
	case "chat.postMessage":
		rep = s.postMessageLocked(args)
	case "chat.update":
		rep = s.updateLocked(args)
	case "views.open":
		rep = s.openViewLocked(args)
	}
	if rep.code == "" {
		rep.warnings = warnings
	}
	return rep
}

// checkArgs refuses unknown arguments and arguments of the wrong JSON type.
func checkArgs(args map[string]any, spec map[string]argKind) []string {
	names := make([]string, 0, len(args))
	for k := range args {
		names = append(names, k)
	}
	sort.Strings(names)
	var msgs []string
	for _, k := range names {
		kind, ok := spec[k]
		if !ok {
			msgs = append(msgs, fmt.Sprintf("[ERROR] unknown argument %q", k))
			continue
		}
		var typeOK bool
		switch v := args[k]; kind {
		case argString:
			_, typeOK = v.(string)
		case argBool:
			_, typeOK = v.(bool)
		case argArray:
			_, typeOK = v.([]any)
		case argObject:
			_, typeOK = v.(map[string]any)
		}
		if !typeOK {
			msgs = append(msgs, fmt.Sprintf("[ERROR] argument %q has the wrong type", k))
		}
	}
	return msgs
}

// resolveLocked finds the conversation a chat.postMessage channel names.
func (s *Server) resolveLocked(channel string) (string, bool) {
	if name, ok := strings.CutPrefix(channel, "#"); ok {
		for id, n := range s.channels {
			if n == name && n != "" {
				return id, true
			}
		}
		return "", false
	}
	if im, ok := s.users[channel]; ok {
		return im, true
	}
	if _, ok := s.channels[channel]; ok {
		return channel, true
	}
	return "", false
}

// checkMessage checks a message's text and blocks (chat.postMessage,
// chat.update and response URL arguments).
func checkMessage(args map[string]any) (text string, blocks json.RawMessage, c *checker, rep *apiReply) {
	text, _ = args["text"].(string)
	c = newChecker(surfaceMessage)
	rawBlocks, hasBlocks := args["blocks"]
	if hasBlocks {
		c.blocks(rawBlocks, "/blocks")
		if len(c.errs) > 0 {
			return "", nil, c, errReply(errInvalidBlocks, c.errs...)
		}
		blocks, _ = json.Marshal(rawBlocks)
	}
	if strings.TrimSpace(text) == "" && (!hasBlocks || len(rawBlocks.([]any)) == 0) {
		return "", nil, c, errReply(errNoText)
	}
	if units(text) > maxMessageText {
		return "", nil, c, errReply(errMsgTooLong)
	}
	if blocks == nil {
		blocks = json.RawMessage("null")
	}
	return text, blocks, c, nil
}

func (s *Server) postMessageLocked(args map[string]any) *apiReply {
	channel, _ := args["channel"].(string)
	if channel == "" {
		return errReply(errChannelMissing)
	}
	id, ok := s.resolveLocked(channel)
	if !ok {
		return errReply(errChannelMissing)
	}
	text, blocks, _, rep := checkMessage(args)
	if rep != nil {
		return rep
	}
	ts := s.nextTSLocked()
	m := &Message{Channel: id, TS: ts, Text: text, Blocks: blocks, Decoded: decodeBlocks(blocks), Versions: 1}
	key := messageKey(id, ts)
	s.messages[key] = m
	s.order = append(s.order, key)
	return okReply(map[string]any{"channel": id, "ts": ts, "message": map[string]any{"type": "message", "ts": ts, "text": text, "blocks": blocks}})
}

func (s *Server) updateLocked(args map[string]any) *apiReply {
	channel, _ := args["channel"].(string)
	ts, _ := args["ts"].(string)
	if _, ok := s.channels[channel]; !ok || channel == "" {
		return errReply(errChannelMissing)
	}
	if ts == "" {
		return errReply(errInvalidArgs, "[ERROR] missing required field: ts")
	}
	m, ok := s.messages[messageKey(channel, ts)]
	if !ok {
		return errReply("message_not_found")
	}
	text, blocks, c, rep := checkMessage(args)
	if rep != nil {
		return rep
	}
	if reused := reusedBlockIDs(m.Blocks, c); len(reused) > 0 {
		return errReply(errInvalidBlocks, reused...)
	}
	m.Text, m.Blocks, m.Decoded = text, blocks, decodeBlocks(blocks)
	m.Versions++
	return okReply(map[string]any{"channel": channel, "ts": ts, "text": text})
}

func (s *Server) openViewLocked(args map[string]any) *apiReply {
	trigger, _ := args["trigger_id"].(string)
	used, minted := s.triggers[trigger]
	switch {
	case trigger == "" || !minted:
		return errReply("invalid_trigger_id")
	case used:
		return errReply("expired_trigger_id")
	}
	s.triggers[trigger] = true
	rawView, ok := args["view"]
	if !ok {
		return errReply(errInvalidArgs, "[ERROR] missing required field: view")
	}
	c := newChecker(surfaceModal)
	m := c.view(rawView, "/view")
	if len(c.errs) > 0 {
		return errReply(errInvalidArgs, c.errs...)
	}
	s.seq++
	id := fmt.Sprintf("V%07d", s.seq)
	raw, _ := json.Marshal(m)
	blocks, _ := json.Marshal(m["blocks"])
	v := View{ID: id, TriggerID: trigger, Raw: raw, Blocks: blocks, Decoded: decodeBlocks(blocks)}
	v.CallbackID, _ = m["callback_id"].(string)
	v.PrivateMetadata, _ = m["private_metadata"].(string)
	if t, ok := m["title"].(map[string]any); ok {
		v.Title, _ = t["text"].(string)
	}
	s.views = append(s.views, v)
	out := map[string]any{}
	for k, val := range m {
		out[k] = val
	}
	out["id"], out["team_id"], out["state"] = id, TeamID, map[string]any{"values": map[string]any{}}
	return okReply(map[string]any{"view": out})
}
