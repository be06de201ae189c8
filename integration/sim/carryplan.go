package sim

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"

	"github.com/baton-run/baton/dispatcher"
	"github.com/baton-run/baton/integration/sim/temporalmodel"
	"github.com/baton-run/baton/takeover"
)

// carryEpoch is one step of a carry plan.
type carryEpoch int

const (
	epochTakeover carryEpoch = iota // a takeover: the open run terminated by run ID, a new one started
	epochClose                      // an operator ends the open run
	epochLate                       // a superseded term's start lands while no run is open
)

func (e carryEpoch) String() string { return [...]string{"takeover", "close", "late"}[e] }

// carryPlan is what a seed draws for the carry world, in the swarm style: each fault on or off, at
// its own rate.
type carryPlan struct {
	epochs    []carryEpoch
	pageMax   int           // the Backlog activity's page size
	lagMax    time.Duration // visibility's lag, at most (0: none)
	faultRate float64       // share of history and visibility reads that fail
	logDenied bool          // the etcd role predates the run log: visibility alone
}

func drawCarryPlan(r *rand.Rand) carryPlan {
	p := carryPlan{pageMax: 1 + r.IntN(5), epochs: []carryEpoch{epochTakeover}}
	for range 2 + r.IntN(7) {
		switch x := r.Float64(); {
		case x < 0.5:
			p.epochs = append(p.epochs, epochTakeover)
		case x < 0.75:
			p.epochs = append(p.epochs, epochLate)
		default:
			p.epochs = append(p.epochs, epochClose)
		}
	}
	if r.Float64() < 0.7 {
		p.lagMax = time.Duration(1+r.IntN(60)) * time.Second
	}
	if r.Float64() < 0.6 {
		p.faultRate = 0.01 + 0.09*r.Float64()
	}
	p.logDenied = r.Float64() < 0.2
	return p
}

func (p carryPlan) String() string {
	es := make([]string, len(p.epochs))
	for i, e := range p.epochs {
		es[i] = e.String()
	}
	return fmt.Sprintf("epochs=[%s] page=%d lag<%v faults=%.2f log-denied=%v", strings.Join(es, " "), p.pageMax, p.lagMax,
		p.faultRate, p.logDenied)
}

// visibilityLag draws the lag of one visibility change. Without the run log the carry-over relies on
// visibility alone, and a row missing while later ones are listed hides a run for good (the
// documented limit of that mode): such seeds lag only a close.
func (w *CarryWorld) visibilityLag(r *rand.Rand, closing bool) time.Duration {
	if w.plan.lagMax == 0 || w.faultsOff || w.plan.logDenied && !closing {
		return 0
	}
	return time.Duration(r.Int64N(int64(w.plan.lagMax)))
}

// faultyHistory is the Backlog activity's HistoryReader: the Temporal model's client, whose reads
// fail at the plan's rate until the heal.
type faultyHistory struct {
	c *temporalmodel.Client
	w *CarryWorld
	r *rand.Rand
}

var _ dispatcher.HistoryReader = (*faultyHistory)(nil)

func (h *faultyHistory) fail() error {
	if h.w.faultsOff || h.w.plan.faultRate == 0 || h.r.Float64() >= h.w.plan.faultRate {
		return nil
	}
	return serviceerror.NewUnavailable("sim: the read was lost")
}

func (h *faultyHistory) DescribeWorkflowExecution(ctx context.Context, id, runID string) (*workflowservice.DescribeWorkflowExecutionResponse, error) {
	if err := h.fail(); err != nil {
		return nil, err
	}
	return h.c.DescribeWorkflowExecution(ctx, id, runID)
}

func (h *faultyHistory) ListWorkflow(ctx context.Context, req *workflowservice.ListWorkflowExecutionsRequest) (*workflowservice.ListWorkflowExecutionsResponse, error) {
	if err := h.fail(); err != nil {
		return nil, err
	}
	return h.c.ListWorkflow(ctx, req)
}

func (h *faultyHistory) GetWorkflowHistory(ctx context.Context, id, runID string, longPoll bool,
	filter enumspb.HistoryEventFilterType) client.HistoryEventIterator {
	if err := h.fail(); err != nil {
		return failedIter{err}
	}
	if filter == enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT {
		for _, r := range h.w.tm.Runs(id) {
			if r.RunID == runID && r.Status == enumspb.WORKFLOW_EXECUTION_STATUS_CONTINUED_AS_NEW {
				h.w.probe(ProbeCarryChain)
			}
		}
	}
	return h.c.GetWorkflowHistory(ctx, id, runID, longPoll, filter)
}

type failedIter struct{ err error }

func (failedIter) HasNext() bool                            { return true }
func (f failedIter) Next() (*historypb.HistoryEvent, error) { return nil, f.err }

// deniedRunLog is the run log of an etcd role that predates it.
type deniedRunLog struct{}

func (deniedRunLog) Runs(context.Context, string) ([]takeover.LoggedRun, error) {
	return nil, takeover.ErrRunLogDenied
}

func (deniedRunLog) Forget(context.Context, string, []string) error { return takeover.ErrRunLogDenied }
