package slacktest

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// InteractionsURL is the URL of the requests Click and Submit build; a test
// serving the handler on a real server replaces its scheme and host.
const InteractionsURL = "http://countersign.test/slack/interactions"

// maxResponseURLUses is how often Slack takes a response URL.
const maxResponseURLUses = 5

// Sign returns the headers with which Slack signs body at ts with secret:
// X-Slack-Request-Timestamp and X-Slack-Signature "v0=" + hex HMAC-SHA256
// of "v0:<ts>:<body>".
func Sign(secret string, ts time.Time, body []byte) http.Header {
	stamp := strconv.FormatInt(ts.Unix(), 10)
	m := hmac.New(sha256.New, []byte(secret))
	fmt.Fprintf(m, "v0:%s:", stamp)
	m.Write(body)
	h := http.Header{}
	h.Set("X-Slack-Request-Timestamp", stamp)
	h.Set("X-Slack-Signature", "v0="+hex.EncodeToString(m.Sum(nil)))
	return h
}

// signedRequest is the form POST Slack sends with payload, signed at now.
func signedRequest(secret string, payload any, now time.Time) *http.Request {
	raw, err := json.Marshal(payload)
	if err != nil {
		panic("slacktest: encoding a payload: " + err.Error())
	}
	body := []byte("payload=" + url.QueryEscape(string(raw)))
	req, err := http.NewRequest(http.MethodPost, InteractionsURL, strings.NewReader(string(body)))
	if err != nil {
		panic("slacktest: " + err.Error())
	}
	for k, v := range Sign(secret, now, body) {
		req.Header[k] = v
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("User-Agent", "Slackbot 1.0 (+https://api.slack.com/robots)")
	return req
}

func user(id string) map[string]any {
	return map[string]any{"id": id, "username": strings.ToLower(id), "name": strings.ToLower(id), "team_id": TeamID}
}

// Click builds the signed block_actions request Slack sends when userID
// clicks the button actionID of msg (a message from Messages), at now. It
// mints the payload's response URL (bound to the message) and trigger id.
// The test fails if msg has no such button.
func (s *Server) Click(signingSecret string, msg Message, actionID, userID string, now time.Time) *http.Request {
	s.t.Helper()
	blockID, button, ok := findButton(msg.Blocks, actionID)
	if !ok {
		s.t.Fatalf("slacktest: message %s has no button %q", msg.Ref(), actionID)
		return nil
	}
	s.mu.Lock()
	trigger := s.newTriggerLocked()
	responseURL := s.newResponseURLLocked(msg.Channel, msg.TS)
	name := s.channels[msg.Channel]
	s.mu.Unlock()
	action := map[string]any{
		"action_id": actionID,
		"block_id":  blockID,
		"text":      button["text"],
		"type":      "button",
		"action_ts": fmt.Sprintf("%d.%06d", now.Unix(), now.Nanosecond()/1000),
	}
	for _, k := range []string{"value", "style"} {
		if v, ok := button[k]; ok {
			action[k] = v
		}
	}
	payload := map[string]any{
		"type":       "block_actions",
		"user":       user(userID),
		"api_app_id": "A0COUNTERSIGN",
		"token":      "unused-verification-token",
		"container": map[string]any{
			"type": "message", "message_ts": msg.TS, "channel_id": msg.Channel, "is_ephemeral": false,
		},
		"trigger_id": trigger,
		"team":       map[string]any{"id": TeamID, "domain": "countersign-test"},
		"enterprise": nil,
		"channel":    map[string]any{"id": msg.Channel, "name": name},
		"message": map[string]any{
			"type": "message", "user": "U0BOT", "bot_id": "B0BOT", "ts": msg.TS,
			"text": msg.Text, "blocks": msg.Blocks,
		},
		"state":        map[string]any{"values": map[string]any{}},
		"response_url": responseURL,
		"actions":      []any{action},
	}
	return signedRequest(signingSecret, payload, now)
}

// findButton finds the button actionID in raw blocks.
func findButton(blocks json.RawMessage, actionID string) (blockID string, button map[string]any, ok bool) {
	var list []map[string]any
	if json.Unmarshal(blocks, &list) != nil {
		return "", nil, false
	}
	for _, b := range list {
		var elems []any
		switch b["type"] {
		case "actions":
			elems, _ = b["elements"].([]any)
		case "section":
			if acc, ok := b["accessory"]; ok {
				elems = []any{acc}
			}
		}
		for _, e := range elems {
			if m, ok := e.(map[string]any); ok && m["type"] == "button" && m["action_id"] == actionID {
				id, _ := b["block_id"].(string)
				return id, m, true
			}
		}
	}
	return "", nil, false
}

// Submit builds the signed view_submission request Slack sends when userID
// submits view (from Views) with values (block_id → action_id → typed
// text), at now. The test fails if a value names no input of the view, or
// a required input has no value (Slack would not submit).
func (s *Server) Submit(signingSecret string, view View, userID string, values map[string]map[string]string, now time.Time) *http.Request {
	s.t.Helper()
	inputs := map[string]map[string]bool{} // block id → action id → optional
	var blocks []map[string]any
	_ = json.Unmarshal(view.Blocks, &blocks)
	for _, b := range blocks {
		if b["type"] != "input" {
			continue
		}
		id, _ := b["block_id"].(string)
		el, _ := b["element"].(map[string]any)
		action, _ := el["action_id"].(string)
		optional, _ := b["optional"].(bool)
		inputs[id] = map[string]bool{action: optional}
	}
	state := map[string]any{}
	for blockID, actions := range values {
		for actionID, value := range actions {
			if _, ok := inputs[blockID][actionID]; !ok {
				s.t.Fatalf("slacktest: view %s has no input %s/%s", view.ID, blockID, actionID)
				return nil
			}
			state[blockID] = map[string]any{actionID: map[string]any{"type": "plain_text_input", "value": value}}
		}
	}
	for blockID, actions := range inputs {
		for actionID, optional := range actions {
			if !optional && strings.TrimSpace(values[blockID][actionID]) == "" {
				s.t.Fatalf("slacktest: required input %s/%s of view %s is empty; Slack would not submit it", blockID, actionID, view.ID)
				return nil
			}
		}
	}
	s.mu.Lock()
	trigger := s.newTriggerLocked()
	s.mu.Unlock()
	var v map[string]any
	_ = json.Unmarshal(view.Raw, &v)
	if v == nil {
		v = map[string]any{}
	}
	v["id"], v["team_id"], v["app_id"], v["bot_id"] = view.ID, TeamID, "A0COUNTERSIGN", "B0BOT"
	v["state"] = map[string]any{"values": state}
	v["hash"] = randomHex(8)
	v["root_view_id"], v["previous_view_id"] = view.ID, nil
	v["app_installed_team_id"] = TeamID
	payload := map[string]any{
		"type":                  "view_submission",
		"team":                  map[string]any{"id": TeamID, "domain": "countersign-test"},
		"user":                  user(userID),
		"api_app_id":            "A0COUNTERSIGN",
		"token":                 "unused-verification-token",
		"trigger_id":            trigger,
		"view":                  v,
		"response_urls":         []any{},
		"is_enterprise_install": false,
		"enterprise":            nil,
	}
	return signedRequest(signingSecret, payload, now)
}

// responseFields are what a response URL takes.
var responseFields = map[string]bool{
	"text": true, "blocks": true, "attachments": true, "response_type": true, "replace_original": true,
	"delete_original": true, "thread_ts": true, "mrkdwn": true, "unfurl_links": true, "unfurl_media": true,
	"reply_broadcast": true, "parse": true,
}

func (s *Server) serveResponseURL(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(io.LimitReader(r.Body, 10<<20))
	s.mu.Lock()
	post, status := s.responseLocked(r, body)
	s.posts = append(s.posts, post)
	if post.Error != "" {
		s.refused = append(s.refused, Call{Method: "response_url", Body: body, Error: post.Error})
	}
	s.changedLocked()
	s.mu.Unlock()
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(status)
	if post.Error != "" {
		_ = json.NewEncoder(w).Encode(map[string]any{"ok": false, "error": post.Error})
		return
	}
	_ = json.NewEncoder(w).Encode(map[string]any{"ok": true})
}

// flag reads a response URL boolean: Slack takes true or "true".
func flag(v any) (bool, bool) {
	switch b := v.(type) {
	case nil:
		return false, true
	case bool:
		return b, true
	case string:
		if b == "true" || b == "false" {
			return b == "true", true
		}
	}
	return false, false
}

func (s *Server) responseLocked(r *http.Request, body []byte) (ResponsePost, int) {
	post := ResponsePost{URL: s.srv.URL + r.URL.Path, Body: body}
	ru, ok := s.responses[r.URL.Path]
	if !ok {
		post.Error = "invalid_url"
		return post, http.StatusNotFound
	}
	post.Channel, post.TS = ru.channel, ru.ts
	if ru.uses >= maxResponseURLUses {
		post.Error = "used_url"
		return post, http.StatusNotFound
	}
	ru.uses++
	if r.Method != http.MethodPost {
		post.Error = "invalid_request"
		return post, http.StatusMethodNotAllowed
	}
	if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" {
		post.Error = "invalid_payload"
		return post, http.StatusBadRequest
	}
	v, err := decodeJSON(body)
	m, isObj := v.(map[string]any)
	if err != nil || !isObj {
		post.Error = "invalid_payload"
		return post, http.StatusBadRequest
	}
	for k := range m {
		if !responseFields[k] {
			post.Error = "invalid_payload"
			return post, http.StatusBadRequest
		}
	}
	var okReplace, okDelete bool
	post.ReplaceOriginal, okReplace = flag(m["replace_original"])
	post.DeleteOriginal, okDelete = flag(m["delete_original"])
	var typeOK bool
	post.ResponseType, typeOK = stringOrEmpty(m["response_type"])
	var textOK, threadOK bool
	post.Text, textOK = stringOrEmpty(m["text"])
	post.ThreadTS, threadOK = stringOrEmpty(m["thread_ts"])
	if !okReplace || !okDelete || !typeOK || !textOK || !threadOK || (post.ResponseType != "" && post.ResponseType != "ephemeral" && post.ResponseType != "in_channel") {
		post.Error = "invalid_payload"
		return post, http.StatusBadRequest
	}
	if post.DeleteOriginal {
		key := messageKey(ru.channel, ru.ts)
		if _, ok := s.messages[key]; !ok {
			post.Error = "message_not_found"
			return post, http.StatusNotFound
		}
		delete(s.messages, key)
		return post, http.StatusOK
	}
	text, blocks, c, rep := checkMessage(m)
	if rep != nil {
		post.Error = rep.code + " " + strings.Join(rep.messages, "; ")
		return post, http.StatusBadRequest
	}
	post.Blocks = blocks
	if post.ReplaceOriginal {
		orig, ok := s.messages[messageKey(ru.channel, ru.ts)]
		if !ok {
			post.Error = "no_original_message"
			return post, http.StatusNotFound
		}
		if reused := reusedBlockIDs(orig.Blocks, c); len(reused) > 0 {
			post.Error = errInvalidBlocks + " " + strings.Join(reused, "; ")
			return post, http.StatusBadRequest
		}
		orig.Text, orig.Blocks, orig.Decoded = text, blocks, decodeBlocks(blocks)
		orig.Versions++
	}
	return post, http.StatusOK
}

func stringOrEmpty(v any) (string, bool) {
	if v == nil {
		return "", true
	}
	s, ok := v.(string)
	return s, ok
}
