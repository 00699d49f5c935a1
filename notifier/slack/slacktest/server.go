package slacktest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"

	slackgo "github.com/slack-go/slack"
)

// TeamID is the workspace of every payload the fake builds.
const TeamID = "T0COUNTERSIGN"

// Server is the fake. Create it with New; it closes when the test ends.
type Server struct {
	t     testing.TB
	srv   *httptest.Server
	token string

	mu        sync.Mutex
	changed   chan struct{} // closed and replaced on every request
	seq       int
	channels  map[string]string // conversation id → name
	users     map[string]string // user id → its direct message channel id
	messages  map[string]*Message
	order     []string // message keys in posting order
	calls     []Call
	refused   []Call
	views     []View
	triggers  map[string]bool // minted trigger id → used
	responses map[string]*responseURL
	posts     []ResponsePost
	failures  map[string][]failure
}

// Call is one request to the fake.
type Call struct {
	// Method is the Web API method ("chat.postMessage") or "response_url".
	Method string
	// Body is the raw request body.
	Body []byte
	// Error is the error code of a refused call, "" when it succeeded.
	Error string
	// Messages are the details of a refusal (response_metadata.messages).
	Messages []string
	// Warnings are what Slack would warn about in a successful call
	// (e.g. missing_charset).
	Warnings []string
	// Injected marks a failure made by FailNext; those are not in Refused.
	Injected bool
	// Ref is the "<channel>/<ts>" of the message a successful
	// chat.postMessage or chat.update wrote, "" otherwise.
	Ref string
}

func (c Call) String() string {
	if c.Error == "" {
		return c.Method + ": ok"
	}
	return c.Method + ": " + c.Error + " " + strings.Join(c.Messages, "; ")
}

// Message is the current state of one message.
type Message struct {
	// Channel is the conversation id, TS the message's timestamp.
	Channel, TS string
	// Text is the message's text.
	Text string
	// Blocks is the blocks as sent, raw JSON ("null" for none).
	Blocks json.RawMessage
	// Decoded is Blocks decoded with slack-go's Block Kit types.
	Decoded []slackgo.Block
	// Versions counts the times the message was written: 1 when posted,
	// +1 for every update or replacement.
	Versions int
}

// Ref is the message's "<channel>/<ts>".
func (m Message) Ref() string { return m.Channel + "/" + m.TS }

// View is a modal opened with views.open.
type View struct {
	ID, TriggerID   string
	CallbackID      string
	PrivateMetadata string
	Title           string
	// Raw is the view object as sent.
	Raw json.RawMessage
	// Blocks is the view's blocks as sent, Decoded the same with slack-go.
	Blocks  json.RawMessage
	Decoded []slackgo.Block
}

// ResponsePost is one POST to a response URL.
type ResponsePost struct {
	URL  string
	Body []byte
	// Error is why the fake refused it, "" when accepted.
	Error string
	// The decoded fields.
	ReplaceOriginal bool
	DeleteOriginal  bool
	ResponseType    string
	Text            string
	Blocks          json.RawMessage
	ThreadTS        string
	// Channel and TS are the message the URL belongs to (from Click).
	Channel, TS string
}

// Ephemeral reports whether the post was shown only to the user who
// interacted (Slack's default for a response URL that replaces nothing).
func (p ResponsePost) Ephemeral() bool {
	return !p.ReplaceOriginal && !p.DeleteOriginal && p.ResponseType != "in_channel"
}

type failure struct {
	status     int
	code       string
	retryAfter string
}

type responseURL struct {
	channel, ts string
	uses        int
}

// New starts a fake accepting botToken. It is closed when t ends.
func New(t testing.TB, botToken string) *Server {
	t.Helper()
	s := &Server{
		t:         t,
		token:     botToken,
		changed:   make(chan struct{}),
		channels:  map[string]string{},
		users:     map[string]string{},
		messages:  map[string]*Message{},
		triggers:  map[string]bool{},
		responses: map[string]*responseURL{},
		failures:  map[string][]failure{},
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/api/{method}", s.serveAPI)
	mux.HandleFunc("/actions/", s.serveResponseURL)
	s.srv = httptest.NewServer(mux)
	t.Cleanup(s.srv.Close)
	return s
}

// Close stops the fake: from then on every call fails to connect, as
// when Slack cannot be reached. It is called when the test ends too.
func (s *Server) Close() { s.srv.Close() }

// URL is the Web API base, ending in "/api/".
func (s *Server) URL() string { return s.srv.URL + "/api/" }

// Client is an HTTP client for the fake.
func (s *Server) Client() *http.Client { return s.srv.Client() }

// AddChannel registers a conversation: id (C… or G…) and name (without #).
func (s *Server) AddChannel(id, name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.channels[id] = strings.TrimPrefix(name, "#")
}

// AddUser registers a user id (U… or W…) the bot can message directly, and
// returns the id of the direct message channel Slack opens for it.
func (s *Server) AddUser(id string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	im := "D" + strings.TrimPrefix(strings.TrimPrefix(id, "U"), "W")
	s.users[id] = im
	s.channels[im] = ""
	return im
}

// FailNext makes the next call of method fail: with HTTP status (0 means
// 200), with {"ok": false, "error": slackError} when slackError is set,
// and with a Retry-After header when retryAfter is set. Failures queue up.
func (s *Server) FailNext(method string, status int, slackError, retryAfter string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failures[method] = append(s.failures[method], failure{status: status, code: slackError, retryAfter: retryAfter})
}

// Messages are the current messages, in posting order.
func (s *Server) Messages() []Message {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Message, 0, len(s.order))
	for _, k := range s.order {
		if m, ok := s.messages[k]; ok {
			out = append(out, *m)
		}
	}
	return out
}

// Message is the current state of the message with ref "<channel>/<ts>".
func (s *Server) Message(ref string) (Message, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	m, ok := s.messages[ref]
	if !ok {
		return Message{}, false
	}
	return *m, true
}

// Calls are every Web API call, in order.
func (s *Server) Calls() []Call {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.calls)
}

// CallsOf are the calls of one method.
func (s *Server) CallsOf(method string) []Call {
	var out []Call
	for _, c := range s.Calls() {
		if c.Method == method {
			out = append(out, c)
		}
	}
	return out
}

// Refused are the calls and response URL posts the fake refused, except
// failures injected with FailNext. A test of valid traffic asserts it is
// empty.
func (s *Server) Refused() []Call {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.refused)
}

// Views are the opened modals, in order.
func (s *Server) Views() []View {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.views)
}

// ResponsePosts are the posts to response URLs, in order.
func (s *Server) ResponsePosts() []ResponsePost {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.posts)
}

// WaitFor returns when cond holds, checking it now and after every request
// the fake serves, or ctx's error when ctx ends first. cond may call the
// Server's getters.
func (s *Server) WaitFor(ctx context.Context, cond func(*Server) bool) error {
	for {
		s.mu.Lock()
		ch := s.changed
		s.mu.Unlock()
		if cond(s) {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("slacktest: condition not met: %w", ctx.Err())
		}
	}
}

// NewTriggerID mints a trigger id that views.open accepts once.
func (s *Server) NewTriggerID() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.newTriggerLocked()
}

func (s *Server) newTriggerLocked() string {
	s.seq++
	id := fmt.Sprintf("%d.%d.%s", 1000000+s.seq, 47445629121, randomHex(16))
	s.triggers[id] = false
	return id
}

// NewResponseURL mints a response URL that belongs to no message: it takes
// ephemeral and in-channel replies, not replace_original.
func (s *Server) NewResponseURL() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.newResponseURLLocked("", "")
}

func (s *Server) newResponseURLLocked(channel, ts string) string {
	s.seq++
	path := fmt.Sprintf("/actions/%s/%d/%s", TeamID, 1000000+s.seq, randomHex(12))
	s.responses[path] = &responseURL{channel: channel, ts: ts}
	return s.srv.URL + path
}

// changedLocked wakes WaitFor.
func (s *Server) changedLocked() {
	close(s.changed)
	s.changed = make(chan struct{})
}

func (s *Server) nextTSLocked() string {
	s.seq++
	return fmt.Sprintf("%d.%06d", 1767225600+s.seq, s.seq%1000000)
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func messageKey(channel, ts string) string { return channel + "/" + ts }

// decodeBlocks decodes raw blocks with slack-go's types.
func decodeBlocks(raw json.RawMessage) []slackgo.Block {
	if len(raw) == 0 || string(raw) == "null" {
		return nil
	}
	var b slackgo.Blocks
	if err := json.Unmarshal(raw, &b); err != nil {
		return nil
	}
	return b.BlockSet
}

// Button is a button of a message.
type Button struct {
	BlockID, ActionID string
	Text, Value, URL  string
	Style             string
	// Confirm is the confirmation dialog's raw JSON, nil without one.
	Confirm json.RawMessage
}

// Buttons are the message's buttons, in order.
func (m Message) Buttons() []Button {
	return buttonsOf(m.Blocks)
}

// HasActions reports whether the message has an actions block.
func (m Message) HasActions() bool {
	return slices.Contains(m.BlockTypes(), "actions")
}

// BlockTypes are the types of the message's blocks, in order.
func (m Message) BlockTypes() []string {
	var list []map[string]any
	_ = json.Unmarshal(m.Blocks, &list)
	out := make([]string, 0, len(list))
	for _, b := range list {
		typ, _ := b["type"].(string)
		out = append(out, typ)
	}
	return out
}

// Texts are the texts of every text object in the message's blocks (block
// texts, fields, context elements, buttons and their dialogs), decoded
// from JSON: blocks in order, a block's fields by name.
func (m Message) Texts() []string { return textsOf(m.Blocks) }

// Texts are the texts of every text object in the view's blocks.
func (v View) Texts() []string { return textsOf(v.Blocks) }

// InitialValue is the initial value of the input blockID, "" without one.
func (v View) InitialValue(blockID string) string {
	var list []map[string]any
	_ = json.Unmarshal(v.Blocks, &list)
	for _, b := range list {
		if b["type"] == "input" && b["block_id"] == blockID {
			el, _ := b["element"].(map[string]any)
			s, _ := el["initial_value"].(string)
			return s
		}
	}
	return ""
}

func textsOf(raw json.RawMessage) []string {
	var v any
	_ = json.Unmarshal(raw, &v)
	var out []string
	var walk func(any)
	walk = func(v any) {
		switch x := v.(type) {
		case map[string]any:
			if t, ok := x["type"].(string); ok && (t == textPlain || t == textMrkdwn) {
				if s, ok := x["text"].(string); ok {
					out = append(out, s)
				}
				return
			}
			keys := make([]string, 0, len(x))
			for k := range x {
				keys = append(keys, k)
			}
			slices.Sort(keys) // a block's fields in name order; arrays keep theirs
			for _, k := range keys {
				walk(x[k])
			}
		case []any:
			for _, e := range x {
				walk(e)
			}
		}
	}
	walk(v)
	return out
}

func buttonsOf(raw json.RawMessage) []Button {
	var list []map[string]any
	_ = json.Unmarshal(raw, &list)
	var out []Button
	for _, b := range list {
		blockID, _ := b["block_id"].(string)
		elems, _ := b["elements"].([]any)
		if acc, ok := b["accessory"]; ok {
			elems = append(elems, acc)
		}
		for _, e := range elems {
			m, ok := e.(map[string]any)
			if !ok || m["type"] != "button" {
				continue
			}
			btn := Button{BlockID: blockID}
			btn.ActionID, _ = m["action_id"].(string)
			btn.Value, _ = m["value"].(string)
			btn.URL, _ = m["url"].(string)
			btn.Style, _ = m["style"].(string)
			if t, ok := m["text"].(map[string]any); ok {
				btn.Text, _ = t["text"].(string)
			}
			if c, ok := m["confirm"]; ok {
				btn.Confirm, _ = json.Marshal(c)
			}
			out = append(out, btn)
		}
	}
	return out
}
