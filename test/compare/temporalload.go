package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"sync"
	"time"

	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/log"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"
)

// The workflow an agent runs on Temporal: it waits for a human's approve
// signal, then resumes and completes.
const (
	workflowName  = "ApprovalWait"
	signalApprove = "approve"
	taskQueue     = "countersign-compare"
	namespace     = "default"
)

// cycleTimeout bounds one cycle; a slower one is an error.
const cycleTimeout = 30 * time.Second

// hooks tell the harness, from inside the workflow code, that a workflow is
// parked on its signal and that it has resumed. They are measurement
// probes: they run only when the code is not being replayed.
type hooks struct {
	mu      sync.Mutex
	waiting map[string]*probe
}

type probe struct {
	onParked func()
	resumed  chan time.Time
}

func newHooks() *hooks { return &hooks{waiting: map[string]*probe{}} }

// expect registers a workflow ID before it starts: onParked runs (and must
// not block) once the workflow waits for its signal, and the returned
// channel receives the moment it resumed.
func (h *hooks) expect(id string, onParked func()) <-chan time.Time {
	p := &probe{onParked: onParked, resumed: make(chan time.Time, 1)}
	h.mu.Lock()
	h.waiting[id] = p
	h.mu.Unlock()
	return p.resumed
}

func (h *hooks) get(id string) *probe {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.waiting[id]
}

func (h *hooks) forget(id string) {
	h.mu.Lock()
	delete(h.waiting, id)
	h.mu.Unlock()
}

// approvalWait is the workflow: park on the approve signal, resume.
func (h *hooks) approvalWait(ctx workflow.Context) error {
	id := workflow.GetInfo(ctx).WorkflowExecution.ID
	p := h.get(id)
	if p != nil && !workflow.IsReplaying(ctx) {
		p.onParked()
	}
	var approved bool
	workflow.GetSignalChannel(ctx, signalApprove).Receive(ctx, &approved)
	if p != nil && !workflow.IsReplaying(ctx) {
		select {
		case p.resumed <- time.Now():
		default:
		}
	}
	if !approved {
		return errors.New("denied")
	}
	return nil
}

// temporalAgents is a client and a worker on one dev server.
type temporalAgents struct {
	c     client.Client
	w     worker.Worker
	hooks *hooks
}

func startAgents(ctx context.Context, addr string) (*temporalAgents, error) {
	c, err := client.DialContext(ctx, client.Options{HostPort: addr, Namespace: namespace, Logger: quietLogger()})
	if err != nil {
		return nil, fmt.Errorf("temporal client: %w", err)
	}
	a := &temporalAgents{c: c, hooks: newHooks()}
	a.w = worker.New(c, taskQueue, worker.Options{})
	a.w.RegisterWorkflowWithOptions(a.hooks.approvalWait, workflow.RegisterOptions{Name: workflowName})
	if err := a.w.Start(); err != nil {
		c.Close()
		return nil, fmt.Errorf("temporal worker: %w", err)
	}
	return a, nil
}

func (a *temporalAgents) close() {
	a.w.Stop()
	a.c.Close()
}

// start starts one workflow with its probes registered.
func (a *temporalAgents) start(ctx context.Context, id string, onParked func()) (client.WorkflowRun, <-chan time.Time, error) {
	resumed := a.hooks.expect(id, onParked)
	run, err := a.c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{
		ID: id, TaskQueue: taskQueue, WorkflowExecutionTimeout: 2 * cycleTimeout,
	}, workflowName)
	if err != nil {
		a.hooks.forget(id)
		return nil, nil, fmt.Errorf("start workflow: %w", err)
	}
	return run, resumed, nil
}

// approve is the human: the approve signal.
func (a *temporalAgents) approve(ctx context.Context, id string) error {
	if err := a.c.SignalWorkflow(ctx, id, "", signalApprove, true); err != nil {
		return fmt.Errorf("signal: %w", err)
	}
	return nil
}

// settlePoll spaces the checks of settled.
const settlePoll = 10 * time.Millisecond

// settled waits until the workflow's first task is recorded as completed on
// the server (no workflow task pending), so a signal sent now is the only
// thing that wakes it. It asks first after one poll interval: the task's
// completion is on its way when the workflow code has parked.
func (a *temporalAgents) settled(ctx context.Context, id string) error {
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(settlePoll):
		}
		resp, err := a.c.DescribeWorkflowExecution(ctx, id, "")
		if err != nil {
			return fmt.Errorf("describe: %w", err)
		}
		if resp.GetPendingWorkflowTask() == nil {
			return nil
		}
	}
}

func workflowID(prefix string, i int) string { return prefix + "-" + strconv.Itoa(i) }

func describeDefault() *workflowservice.DescribeNamespaceRequest {
	return &workflowservice.DescribeNamespaceRequest{Namespace: namespace}
}

// quietLogger passes on the SDK's warnings and errors only.
func quietLogger() log.Logger {
	return log.NewStructuredLogger(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
}
