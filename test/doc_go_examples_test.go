package test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// The docs' Go examples are fragments of a program: each is pasted,
// verbatim, into a function of one program that gives it what it names
// (ctx, js, calls, runID, token, …) from its environment, and prints what
// the example does with it (run, reply, verified) for the test to check.
// The only change made to an example's lines: the API address the docs
// name (make run's) becomes the test server's.

// goExample names a Go block of the docs: the file, the section, a line it
// holds, and the function of the harness it goes into.
type goExample struct {
	file, heading, has, fn string
}

var goExamples = []goExample{
	{"docs/using.md", "# Go library", "gate.Review(", "goLibrary"},
	{"docs/using.md", "# Go HTTP client", "client.New(", "goHTTPClient"},
	{"docs/decisions.md", "## Agents asking humans", "gate.Ask(", "goAsk"},
	{"docs/mcp.md", "## Receipts for servers that verify them", "receipt.Verify(", "goVerifyReceipt"},
}

const goHarness = `// A program made of the docs' Go examples, written by the test.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/countersign/countersign/events/embedded"
	"github.com/countersign/countersign/contracts"
	"github.com/countersign/countersign/contracts/client"
	"github.com/countersign/countersign/contracts/receipt"
	"github.com/countersign/countersign/orchestrator"
	"github.com/countersign/countersign/orchestrator/policy"
)

func main() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	examples := map[string]func(context.Context) error{
		"goLibrary": goLibrary, "goHTTPClient": goHTTPClient, "goAsk": goAsk, "goVerifyReceipt": goVerifyReceipt,
	}
	if err := examples[os.Args[1]](ctx); err != nil {
		fmt.Println("error:", err)
		os.Exit(1)
	}
}

func connect() (jetstream.JetStream, error) {
	nc, err := nats.Connect(os.Getenv("EX_NATS_URL"), nats.UserInfo(os.Getenv("EX_NATS_USER"), os.Getenv("EX_NATS_PASSWORD")),
		embedded.InboxOptionFor(os.Getenv("EX_NATS_USER")))
	if err != nil {
		return nil, err
	}
	return jetstream.New(nc)
}

type paymentsService struct{}

func (paymentsService) Send(ctx context.Context, args json.RawMessage) error {
	fmt.Printf("sent %s\n", args)
	return nil
}

func goLibrary(ctx context.Context) error {
	js, err := connect()
	if err != nil {
		return err
	}
	runID := os.Getenv("EX_RUN_ID")
	var calls []orchestrator.ToolCall
	if err := json.Unmarshal([]byte(os.Getenv("EX_CALLS")), &calls); err != nil {
		return err
	}
	run := func(args json.RawMessage) { fmt.Printf("run %s\n", args) }
	reply := func(reason string) { fmt.Printf("reply %s\n", reason) }
	return func() error {
//goLibrary
		return err
	}()
}

func goHTTPClient(ctx context.Context) error {
	token := os.Getenv("EX_TOKEN")
	runID, callID := os.Getenv("EX_RUN_ID"), os.Getenv("EX_CALL_ID")
	args := json.RawMessage(os.Getenv("EX_ARGS"))
	payments := paymentsService{}
	reply := func(reason string) { fmt.Printf("reply %s\n", reason) }
	return func() error {
//goHTTPClient
		if err == nil {
			fmt.Printf("verdict %s\n", res.Verdict)
		}
		return err
	}()
}

func goAsk(ctx context.Context) error {
	js, err := connect()
	if err != nil {
		return err
	}
	pol, err := policy.Load("deploy/policy.yaml")
	if err != nil {
		return err
	}
	gate, err := orchestrator.NewGate(ctx, orchestrator.Config{JS: js, Policy: orchestrator.StaticPolicy{P: pol}})
	if err != nil {
		return err
	}
	run := contracts.Run{ID: os.Getenv("EX_RUN_ID"), Agent: "travel-bot"}
	var tools []orchestrator.ToolDefinition
	call := orchestrator.ToolCall{ID: os.Getenv("EX_CALL_ID"), Name: orchestrator.RequestHumanInputToolName,
		Arguments: json.RawMessage(os.Getenv("EX_ARGS"))}
	reply := func(id, result string) { fmt.Printf("reply %s %s\n", id, result) }
	return func() error {
//goAsk
		fmt.Printf("tools %s\n", tools[0].Name)
		return err
	}()
}

func goVerifyReceipt(ctx context.Context) error {
	req := &mcp.CallToolRequest{Params: &mcp.CallToolParamsRaw{
		Meta:      mcp.Meta{"countersign/receipt": os.Getenv("EX_RECEIPT")},
		Name:      os.Getenv("EX_TOOL"),
		Arguments: json.RawMessage(os.Getenv("EX_ARGS")),
	}}
	keys, err := receipt.NewFetcher(receipt.FetcherConfig{URL: os.Getenv("EX_URL") + "/.well-known/jwks.json"})
	if err != nil {
		return err
	}
	return func() error {
//goVerifyReceipt
		if err == nil {
			fmt.Printf("verified %s %s %s\n", claims.Tool, claims.EventID, claims.Basis)
		}
		return err
	}()
}
`

var (
	goExamplesOnce sync.Once
	goExamplesBin  string
	goExamplesErr  string
)

// goExamplesProgram builds the harness with the docs' Go examples in it,
// once for the package's tests, and returns the program's path.
func goExamplesProgram(t *testing.T) string {
	t.Helper()
	goExamplesOnce.Do(func() {
		goExamplesErr = "the docs' Go examples were not built (see the first test that tried)"
		src := goHarness
		for _, ex := range goExamples {
			d := readDocExamples(t, ex.file, ex.heading)
			b := d.take(t, "go", ex.has)
			code := strings.ReplaceAll(b.text, `"http://127.0.0.1:8080"`, `os.Getenv("EX_URL")`)
			src = strings.Replace(src, "//"+ex.fn+"\n", code, 1)
		}
		// A package of the module, in a directory go's ./... patterns skip.
		dir, err := os.MkdirTemp(".", "_docexamples")
		if err != nil {
			goExamplesErr = err.Error()
			return
		}
		defer os.RemoveAll(dir)
		if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(src), 0o644); err != nil {
			goExamplesErr = err.Error()
			return
		}
		goExamplesBin = filepath.Join(filepath.Dir(binary), "docexamples")
		build := exec.Command("go", "build", "-o", goExamplesBin, "./"+dir)
		if out, err := build.CombinedOutput(); err != nil {
			goExamplesErr = "the docs' Go examples do not build as written:\n" + string(out) + "\n" + numbered(src)
			return
		}
		goExamplesErr = ""
	})
	if goExamplesErr != "" {
		t.Fatal(goExamplesErr)
	}
	return goExamplesBin
}

func numbered(src string) string {
	var b strings.Builder
	for i, l := range strings.Split(src, "\n") {
		fmt.Fprintf(&b, "%4d  %s\n", i+1, l)
	}
	return b.String()
}

// runGoExample is the command that runs example fn of the harness from the
// repository root, with env.
func runGoExample(t *testing.T, fn string, env ...string) *exec.Cmd {
	t.Helper()
	abs, err := filepath.Abs(goExamplesProgram(t))
	if err != nil {
		t.Fatal(err)
	}
	c := exec.Command(abs, fn)
	c.Dir = ".."
	c.Env = append(os.Environ(), env...)
	return c
}
