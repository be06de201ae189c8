package dispatcher

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"
)

// appInput is an application's own dispatcher input: Baton's Input inside, and its own field.
type appInput struct {
	Input
	Region string `json:"region"`
}

const appWorkflow = "shipping.Dispatcher"

// appWorkflowFunc announces (an activity that takes a while) before serving, as an application's own
// dispatcher does; announced records the order of events.
func appWorkflowFunc(announced *[]string) func(ctx workflow.Context, in appInput) error {
	return func(ctx workflow.Context, in appInput) error {
		return Serve(ctx, in.Input, ServeOptions{
			Start: func(ctx workflow.Context) error {
				ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{StartToCloseTimeout: time.Minute})
				err := workflow.ExecuteActivity(ctx, "app.Announce", in.Region).Get(ctx, nil)
				*announced = append(*announced, "announced")
				return err
			},
			Next: func(next Input) []any { in.Input = next; return []any{in} },
		})
	}
}

// appEnv is a test environment with the application's workflow, its announce activity (taking
// announce) and Baton's activities on an in-memory ledger.
func appEnv(t *testing.T, events *[]string, announce time.Duration) (*testsuite.TestWorkflowEnvironment, *countingHandler) {
	t.Helper()
	h := &countingHandler{}
	env := newSuiteEnv()
	env.RegisterWorkflowWithOptions(appWorkflowFunc(events), workflow.RegisterOptions{Name: appWorkflow})
	if err := RegisterActivities(env, &Activities{Ledger: &memLedger{}, Handler: h.handle, History: firstRun{}}); err != nil {
		t.Fatal(err)
	}
	env.RegisterActivityWithOptions(func(context.Context, string) error {
		time.Sleep(announce)
		return nil
	}, activity.RegisterOptions{Name: "app.Announce"})
	return env, h
}

// Baton's handlers are registered before the application's Start runs: an update sent while the
// announce activity is in flight is accepted, waits, and is handled once Start returned.
func TestServeAcceptsUpdatesDuringStart(t *testing.T) {
	var events []string
	env, h := appEnv(t, &events, 50*time.Millisecond) // the announce is in flight while the update arrives
	var res Result
	var updateErr error
	updated := false
	env.RegisterDelayedCallback(func() {
		env.UpdateWorkflow(UpdateDispatch, req("early").Key(), &testUpdate{
			reject:   func(err error) { updated, updateErr = true, err },
			accept:   func() { events = append(events, "accepted") },
			complete: func(v any, err error) { updated, updateErr = true, err; res, _ = v.(Result) },
		}, req("early"))
	}, 0)
	env.RegisterDelayedCallback(env.CancelWorkflow, 10*time.Second)
	env.ExecuteWorkflow(appWorkflow, appInput{Input: Input{Owner: owner}, Region: "eu-west"})
	if !updated || updateErr != nil || res.Duplicate {
		t.Fatalf("update sent during Start: completed %v, err %v, result %+v; want handled", updated, updateErr, res)
	}
	if h.seen()[req("early").Key()] != 1 {
		t.Fatalf("handler calls %v, want the early request once", h.seen())
	}
	if len(events) < 2 || events[0] != "accepted" || events[1] != "announced" {
		t.Fatalf("events %v: want the update accepted before Start returned", events)
	}
}

// A run of the application's workflow continues as new into its own type, with the input Next
// returns: the application's field kept, Baton's carry inside.
func TestServeContinuesAsNewAsTheApplicationsWorkflow(t *testing.T) {
	var events []string
	env, h := appEnv(t, &events, 0)
	env.RegisterDelayedCallback(func() { env.SignalWorkflow(SignalDispatch, req("t1")) }, time.Second)
	env.RegisterDelayedCallback(func() { env.SetCurrentHistoryLength(41) }, 3*time.Second)
	env.ExecuteWorkflow(appWorkflow, appInput{Input: Input{Owner: owner, HistoryLimit: 40}, Region: "eu-west"})
	var can *workflow.ContinueAsNewError
	if err := env.GetWorkflowError(); !errors.As(err, &can) {
		t.Fatalf("workflow ended with %v, want continue-as-new", err)
	}
	if can.WorkflowType.Name != appWorkflow {
		t.Fatalf("continued as %q, want the application's own type %q", can.WorkflowType.Name, appWorkflow)
	}
	var next appInput
	if err := converter.GetDefaultDataConverter().FromPayloads(can.Input, &next); err != nil {
		t.Fatal(err)
	}
	if h.seen()[req("t1").Key()] != 1 {
		t.Errorf("handler calls %v, want t1 once before the run continued as new", h.seen())
	}
	if next.Region != "eu-west" || next.Owner != owner || next.Carry == nil || next.Carry.Dispatched != 1 || next.HistoryLimit != 40 {
		t.Fatalf("next run's input %+v (carry %+v): want the region, the owner, the tuning and the carried state", next, next.Carry)
	}
}

// Tuning that breaks a rule fails the run at once, naming the field.
func TestServeRefusesInvalidTuning(t *testing.T) {
	env := newSuiteEnv()
	env.RegisterWorkflowWithOptions(func(ctx workflow.Context, in Input) error {
		return Serve(ctx, in, ServeOptions{Tuning: RegisterOptions{MaxConcurrent: -1}})
	}, workflow.RegisterOptions{Name: appWorkflow})
	env.ExecuteWorkflow(appWorkflow, Input{Owner: owner})
	err := env.GetWorkflowError()
	if err == nil || !strings.Contains(err.Error(), "MaxConcurrent") || !strings.Contains(err.Error(), ErrTypeInvalidOptions) {
		t.Fatalf("workflow error %v, want %s naming MaxConcurrent", err, ErrTypeInvalidOptions)
	}
}
