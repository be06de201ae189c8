package temporalmodel

import (
	"context"
	"fmt"
	"reflect"
	"runtime"
	"strings"
	"sync"

	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"

	"github.com/baton-run/baton/dispatcher"
	"github.com/baton-run/baton/takeover"
)

// Verb names a request kind; the network and the trace use it.
type Verb string

// The verbs a Client sends.
const (
	VerbStart     Verb = "start"
	VerbTerminate Verb = "terminate"
	VerbDescribe  Verb = "describe"
	VerbUpdate    Verb = "update"
)

// Request is one call to the service as the network carries it: exactly one of the request fields
// is set, by Verb.
type Request struct {
	Verb      Verb
	Start     *StartRequest
	Terminate *TerminateRequest
	Describe  *[2]string // workflow ID, run ID
	Update    *UpdateRequest
}

// WorkflowID is the workflow ID the request addresses.
func (r Request) WorkflowID() string {
	switch r.Verb {
	case VerbStart:
		return r.Start.WorkflowID
	case VerbTerminate:
		return r.Terminate.WorkflowID
	case VerbDescribe:
		return r.Describe[0]
	case VerbUpdate:
		return r.Update.WorkflowID
	}
	return ""
}

// Apply performs req on m and returns the service's answer.
func (m *Model) Apply(req Request) (any, error) {
	switch req.Verb {
	case VerbStart:
		return m.Start(*req.Start)
	case VerbTerminate:
		return nil, m.Terminate(*req.Terminate)
	case VerbDescribe:
		return m.Describe(req.Describe[0], req.Describe[1])
	case VerbUpdate:
		return m.Update(*req.Update)
	}
	return nil, fmt.Errorf("temporalmodel: unknown verb %q", req.Verb)
}

// Sender delivers a request to the service and returns its answer; the simulator's network is one
// (delays, loss, duplicates). Direct applies it to the model at once.
type Sender func(ctx context.Context, req Request) (any, error)

// Direct is the Sender without a network.
func (m *Model) Direct() Sender {
	return func(ctx context.Context, req Request) (any, error) {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		return m.Apply(req)
	}
}

// Client is a takeover.Client over a Model, through a Sender. History long polls go to the model
// directly (they change nothing).
type Client struct {
	model *Model
	send  Sender
	name  string
	mu    sync.Mutex
	reqs  int
	dc    converter.DataConverter
}

var (
	_ takeover.Client          = (*Client)(nil)
	_ dispatcher.HistoryReader = (*Client)(nil)
)

// NewClient returns a client named name (request IDs are "<name>-<n>", so a seed's trace repeats).
// A nil send is m.Direct().
func NewClient(m *Model, name string, send Sender) *Client {
	if send == nil {
		send = m.Direct()
	}
	return &Client{model: m, send: send, name: name, dc: converter.GetDefaultDataConverter()}
}

// requestID is the next request ID. A Client is used by one Manager, whose calls are sequential
// per takeover; callers that share one across goroutines must not rely on the numbering.
func (c *Client) requestID() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.reqs++
	return fmt.Sprintf("%s-%d", c.name, c.reqs)
}

func (c *Client) startRequest(o client.StartWorkflowOptions, workflow any, args []any) (*StartRequest, error) {
	memo := &commonpb.Memo{Fields: map[string]*commonpb.Payload{}}
	for k, v := range o.Memo {
		p, err := c.dc.ToPayload(v)
		if err != nil {
			return nil, fmt.Errorf("temporalmodel: memo %s: %w", k, err)
		}
		memo.Fields[k] = p
	}
	input, err := c.dc.ToPayloads(args...)
	if err != nil {
		return nil, fmt.Errorf("temporalmodel: input: %w", err)
	}
	return &StartRequest{WorkflowID: o.ID, RequestID: c.requestID(), WorkflowType: typeName(workflow),
		TaskQueue: o.TaskQueue, Memo: memo, Input: input, Reuse: o.WorkflowIDReusePolicy, Conflict: o.WorkflowIDConflictPolicy}, nil
}

func typeName(workflow any) string {
	if s, ok := workflow.(string); ok {
		return s
	}
	name := runtime.FuncForPC(reflect.ValueOf(workflow).Pointer()).Name()
	return name[strings.LastIndex(name, ".")+1:]
}

// ExecuteWorkflow starts a run, as the SDK does.
func (c *Client) ExecuteWorkflow(ctx context.Context, o client.StartWorkflowOptions, workflow any, args ...any) (client.WorkflowRun, error) {
	req, err := c.startRequest(o, workflow, args)
	if err != nil {
		return nil, err
	}
	return c.doStart(ctx, req, o.WorkflowExecutionErrorWhenAlreadyStarted)
}

// SignalWithStartWorkflow signals the open run or starts one, as the SDK does.
func (c *Client) SignalWithStartWorkflow(ctx context.Context, workflowID, signalName string, _ any,
	o client.StartWorkflowOptions, workflow any, args ...any) (client.WorkflowRun, error) {
	o.ID = workflowID
	req, err := c.startRequest(o, workflow, args)
	if err != nil {
		return nil, err
	}
	req.Signal = signalName
	return c.doStart(ctx, req, true)
}

func (c *Client) doStart(ctx context.Context, req *StartRequest, errorWhenStarted bool) (client.WorkflowRun, error) {
	resp, err := c.send(ctx, Request{Verb: VerbStart, Start: req})
	if err != nil {
		if already := AsAlreadyStarted(err); already != nil && !errorWhenStarted {
			// The SDK hands back the running run instead of the error.
			return workflowRun{id: req.WorkflowID, runID: already.RunId}, nil
		}
		return nil, err
	}
	return workflowRun{id: req.WorkflowID, runID: resp.(StartResponse).RunID}, nil
}

// DescribeWorkflowExecution describes a run.
func (c *Client) DescribeWorkflowExecution(ctx context.Context, workflowID, runID string) (*workflowservice.DescribeWorkflowExecutionResponse, error) {
	resp, err := c.send(ctx, Request{Verb: VerbDescribe, Describe: &[2]string{workflowID, runID}})
	if err != nil {
		return nil, err
	}
	return resp.(*workflowservice.DescribeWorkflowExecutionResponse), nil
}

// TerminateWorkflowWithOptions terminates a run.
func (c *Client) TerminateWorkflowWithOptions(ctx context.Context, o client.TerminateWorkflowOptions) error {
	_, err := c.send(ctx, Request{Verb: VerbTerminate, Terminate: &TerminateRequest{WorkflowID: o.WorkflowID, RunID: o.RunID,
		FirstRunID: o.FirstExecutionRunID, Reason: o.Reason}})
	return err
}

// UpdateWorkflow sends an Update, completed at once by the run.
func (c *Client) UpdateWorkflow(ctx context.Context, o client.UpdateWorkflowOptions) (client.WorkflowUpdateHandle, error) {
	resp, err := c.send(ctx, Request{Verb: VerbUpdate, Update: &UpdateRequest{WorkflowID: o.WorkflowID, RunID: o.RunID,
		FirstRunID: o.FirstExecutionRunID, Name: o.UpdateName, UpdateID: o.UpdateID}})
	if err != nil {
		return nil, err
	}
	return updateHandle{workflowID: o.WorkflowID, runID: resp.(string), updateID: o.UpdateID}, nil
}

// ListWorkflow lists a workflow ID's runs from visibility (Model.List); like history reads, it goes
// to the model directly.
func (c *Client) ListWorkflow(ctx context.Context, req *workflowservice.ListWorkflowExecutionsRequest) (*workflowservice.ListWorkflowExecutionsResponse, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return c.model.List(req)
}

// GetWorkflowHistory returns the run's history: its close event (long-polled if asked), or every
// event as it is now (the all-event filter, never long-polled).
func (c *Client) GetWorkflowHistory(ctx context.Context, workflowID, runID string, isLongPoll bool,
	filterType enumspb.HistoryEventFilterType) client.HistoryEventIterator {
	if filterType != enumspb.HISTORY_EVENT_FILTER_TYPE_CLOSE_EVENT {
		return &eventsIter{ctx: ctx, m: c.model, id: workflowID, runID: runID}
	}
	return &historyIter{ctx: ctx, m: c.model, id: workflowID, runID: runID, longPoll: isLongPoll}
}

// eventsIter reads a run's whole history, taken when the first event is asked for.
type eventsIter struct {
	ctx       context.Context
	m         *Model
	id, runID string
	read      bool
	events    []*historypb.HistoryEvent
}

func (it *eventsIter) HasNext() bool { return !it.read || len(it.events) > 0 }

func (it *eventsIter) Next() (*historypb.HistoryEvent, error) {
	if !it.read {
		it.read = true
		if err := it.ctx.Err(); err != nil {
			return nil, err
		}
		evs, err := it.m.History(it.id, it.runID)
		if err != nil {
			return nil, err
		}
		it.events = evs
	}
	if len(it.events) == 0 {
		return nil, fmt.Errorf("temporalmodel: no more events")
	}
	ev := it.events[0]
	it.events = it.events[1:]
	return ev, nil
}

type historyIter struct {
	ctx       context.Context
	m         *Model
	id, runID string
	longPoll  bool
	done      bool
}

func (it *historyIter) HasNext() bool { return !it.done }

func (it *historyIter) Next() (*historypb.HistoryEvent, error) {
	it.done = true
	ev, err := it.m.CloseEvent(it.ctx, it.id, it.runID, it.longPoll)
	if err == nil && ev == nil {
		return &historypb.HistoryEvent{}, nil // the run is open: no close event on this page
	}
	return ev, err
}

type workflowRun struct{ id, runID string }

func (r workflowRun) GetID() string                  { return r.id }
func (r workflowRun) GetRunID() string               { return r.runID }
func (r workflowRun) GetFirstExecutionRunID() string { return r.runID }
func (r workflowRun) Get(context.Context, any) error {
	return fmt.Errorf("temporalmodel: a run's result is not modelled")
}
func (r workflowRun) GetWithOptions(ctx context.Context, v any, _ client.WorkflowRunGetOptions) error {
	return r.Get(ctx, v)
}

type updateHandle struct{ workflowID, runID, updateID string }

func (h updateHandle) WorkflowID() string             { return h.workflowID }
func (h updateHandle) RunID() string                  { return h.runID }
func (h updateHandle) UpdateID() string               { return h.updateID }
func (h updateHandle) Get(context.Context, any) error { return nil }
