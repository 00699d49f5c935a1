package browser_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// The countersign binary, built once for the tests that run it as `make run`
// does.
var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

func countersignBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "countersign-browser")
		if err != nil {
			buildErr = err
			return
		}
		binPath = filepath.Join(dir, "countersign")
		out, err := exec.Command("go", "build", "-race", "-o", binPath, "../../services/countersign").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binPath
}

// served is a `countersign serve` process started as `make run` starts it:
// every role, the embedded NATS server on disk, the shipped configuration
// and policy.
type served struct {
	url, token string
	stderr     *syncBuffer
	exited     chan struct{}
	cmd        *exec.Cmd
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func runServe(t *testing.T) *served {
	t.Helper()
	data := t.TempDir()
	// As the Makefile's run target, with ports the OS picks so tests can
	// run side by side.
	cmd := exec.Command(countersignBinary(t), "serve", "--data", data, "--addr", "127.0.0.1:0",
		"--nats-listen", "127.0.0.1:0", "--config", "../../deploy/countersign.yaml", "--policy", "../../deploy/policy.yaml")
	cmd.Dir = "."
	s := launch(t, cmd, "")
	tok, err := os.ReadFile(filepath.Join(data, "dev-token"))
	if err != nil {
		t.Fatal(err)
	}
	s.token = strings.TrimSpace(string(tok))
	return s
}

// review submits one payments.send call and returns its result.
func (s *served) review(t *testing.T, runID, callID string, amount int) map[string]any {
	t.Helper()
	body := fmt.Sprintf(`{"run":{"id":%q,"agent":"billing-bot","requested_by":"carol"},
		"tool_calls":[{"id":%q,"name":"payments.send","arguments":{"amount":%d,"currency":"EUR","recipient":"Globex GmbH"}}]}`,
		runID, callID, amount)
	var out struct {
		Results []map[string]any `json:"results"`
	}
	s.call(t, http.MethodPost, "/v1/reviews", body, &out)
	if len(out.Results) != 1 {
		t.Fatalf("review answered %+v", out)
	}
	return out.Results[0]
}

func (s *served) call(t *testing.T, method, path, body string, out any) int {
	t.Helper()
	req, err := http.NewRequest(method, s.url+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+s.token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v (serve stderr:\n%s)", method, path, err, s.stderr.String())
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			t.Fatalf("%s %s: %d %s", method, path, resp.StatusCode, data)
		}
	}
	return resp.StatusCode
}

// up fails the test if serve exited or logged a permission violation.
func (s *served) up(t *testing.T) {
	t.Helper()
	select {
	case <-s.exited:
		t.Fatalf("serve exited while the inbox was open; stderr:\n%s", s.stderr.String())
	default:
	}
	for _, line := range strings.Split(s.stderr.String(), "\n") {
		if strings.Contains(line, "Permissions Violation") && !strings.Contains(line, "CONSUMER.DELETE") {
			t.Fatalf("serve was refused a permission: %s", line)
		}
	}
	if code := s.call(t, http.MethodGet, "/readyz", "", nil); code != http.StatusOK {
		t.Fatalf("/readyz: %d", code)
	}
}

// The inbox in a real browser against the real binary, started as `make
// run` starts it: sign in with the development token, keep the page open,
// see requests appear and decided ones leave without a reload, and the
// server stays up throughout. (Opening the inbox once made serve exit about
// five seconds later: the api user was refused the live feed.)
func TestBinaryInboxStaysLiveAndServerStaysUp(t *testing.T) {
	s := runServe(t)
	ctx := newBrowser(t, 3*time.Minute)
	do(t, ctx,
		chromedp.Navigate(s.url+"/login"),
		chromedp.WaitVisible(chromedp.ID("token")),
		typeInto(chromedp.ID("token"), s.token),
		click(chromedp.ID("sign-in")),
		chromedp.WaitVisible(chromedp.ID("rows")),
		liveOpen(), markPage(),
		until(`document.querySelectorAll("#rows .row").length === 0`),
	)
	opened := time.Now()

	// A new request appears without a reload.
	first := s.review(t, "run-binary-1", "pay-1", 1250)
	if first["verdict"] != "pending" {
		t.Fatalf("review: %+v", first)
	}
	id, _ := first["event_id"].(string)
	do(t, ctx, until(fmt.Sprintf(`document.querySelector('#rows .row[data-event-id=%q]') !== null`, id)), until(stillSamePage))

	// Decided through the API (as the CLI does), it leaves without a reload.
	if code := s.call(t, http.MethodPost, "/v1/approvals/"+id+"/votes", `{"decision":"reject","comment":"wrong account"}`, nil); code != http.StatusOK {
		t.Fatalf("vote: %d", code)
	}
	do(t, ctx, until(fmt.Sprintf(`document.querySelector('#rows .row[data-event-id=%q]') === null`, id)), until(stillSamePage))
	s.up(t)

	// The page stays open well past the moment the server once died (5 s),
	// the stream's 15 s heartbeat and the feed consumers' 30 s inactivity
	// threshold; every few seconds the server must still be up and a new
	// request must still appear on the same page.
	for n := 2; time.Since(opened) < keepOpen; n++ {
		select {
		case <-time.After(5 * time.Second):
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		}
		s.up(t)
		do(t, ctx, until(`document.documentElement.getAttribute("data-live") === "open"`))
		next := s.review(t, fmt.Sprintf("run-binary-%d", n), "pay", 2500)
		id, _ := next["event_id"].(string)
		do(t, ctx, until(fmt.Sprintf(`document.querySelector('#rows .row[data-event-id=%q]') !== null`, id)), until(stillSamePage))
	}
	s.up(t)
}

// keepOpen is how long the inbox test keeps its page open.
const keepOpen = 45 * time.Second

// launch starts cmd (a serve), ends it when the test does, and returns
// once serve printed its inbox's URL; token is the bearer the test uses.
func launch(t *testing.T, cmd *exec.Cmd, token string) *served {
	t.Helper()
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	s := &served{stderr: &syncBuffer{}, exited: make(chan struct{}), cmd: cmd, token: token}
	cmd.Stderr = s.stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = cmd.Wait(); close(s.exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-s.exited:
		case <-time.After(20 * time.Second):
			_ = cmd.Process.Kill()
			<-s.exited
		}
	})
	lines := make(chan string, 64)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	deadline := time.After(90 * time.Second)
	for s.url == "" {
		select {
		case line, ok := <-lines:
			if !ok {
				t.Fatalf("serve exited before it was ready; stderr:\n%s", s.stderr.String())
			}
			if _, rest, ok := strings.Cut(line, "Inbox:"); ok {
				s.url = strings.TrimSuffix(strings.Fields(rest)[0], "/")
			}
		case <-deadline:
			t.Fatalf("serve did not become ready; stderr:\n%s", s.stderr.String())
		}
	}
	go func() {
		for range lines {
		}
	}()
	return s
}
