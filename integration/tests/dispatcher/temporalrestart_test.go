package dispatcher_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/baton-run/baton/clients"
	"github.com/baton-run/baton/dispatcher"
	"github.com/baton-run/baton/integration/servers/temporalx"
	"github.com/baton-run/baton/takeover"
)

// completionOutage is how long the server stays down after the handler returned: longer than the
// SDK's retries of an activity completion reach (its fifth and last attempt within its 10 s budget
// is at most 7.2 s after the first: pauses of 0.4, 0.8, 1.6 and 3.2 s, 20% jitter), shorter than
// that budget by the server's start.
const completionOutage = 7500 * time.Millisecond

// A dispatch whose handler returned while the Temporal server was down returns soon after the
// server is back. Its activity's completion is refused while the server is down; the SDK retries
// it for 10 s with pauses that double, so a completion still refused after its fifth attempt was
// given up, and the activity ran again only after its StartToCloseTimeout (30 s): the Dispatch
// returned 22 s after the server was back, as a Duplicate. Through a client with
// clients.TemporalDialOptions (as NewTemporal builds it) the completion waits for the connection
// and is sent as soon as the server is back, and so is the Producer's update. The handler still
// runs once.
func TestDispatchReturnsSoonAfterTemporalRestart(t *testing.T) {
	srv := temporalx.Start(t, temporalx.Options{DynamicConfig: map[string]any{
		"matching.numTaskqueueReadPartitions":  1,
		"matching.numTaskqueueWritePartitions": 1,
	}})
	e := newEnvOn(t, srv)
	tc, err := srv.NewClient(func(o *client.Options) { o.ConnectionOptions.DialOptions = clients.TemporalDialOptions() })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tc.Close)
	e.tc = tc // the worker's, the takeover's and the Producer's

	started, stopped := make(chan struct{}), make(chan struct{})
	var once sync.Once
	h := &handled{block: func(ctx context.Context, _ string, _ takeover.Owner) {
		once.Do(func() { close(started) })
		select {
		case <-stopped:
		case <-ctx.Done():
		}
	}}
	e.workerWith(t, h, dispatcher.RegisterOptions{})
	e.take(t, "node-a")
	p := e.producer(t)
	req := request("across-a-restart")
	type outcome struct {
		res dispatcher.Result
		err error
		at  time.Time
	}
	done := make(chan outcome, 1)
	go func() {
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
		defer cancel()
		res, err := p.Dispatch(ctx, project, e.queue, req)
		done <- outcome{res, err, time.Now()}
	}()
	select {
	case <-started: // the run accepted the update; its dispatch is in the handler
	case o := <-done:
		t.Fatalf("Dispatch returned %+v before its handler ran", o)
	case <-time.After(time.Minute):
		t.Fatal("the handler was not called within a minute")
	}
	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}
	close(stopped) // the handler returns; its activity's completion is refused
	time.Sleep(completionOutage)
	if err := srv.Restart(t.Context()); err != nil {
		t.Fatal(err)
	}
	back := time.Now()
	o := <-done
	took := o.at.Sub(back) // negative when it returned before Restart did (the namespace usable)
	t.Logf("Dispatch returned %v after Restart returned", took.Round(time.Millisecond))
	if o.err != nil {
		t.Fatalf("Dispatch = %v; want handled", o.err)
	}
	// Generous for a loaded machine; before the completions waited for the connection, 22 s.
	if bound := 8 * time.Second; took > bound {
		t.Errorf("Dispatch returned %v after the server was back, want within %v: the activity's completion was given up while the server was down", took, bound)
	}
	if o.res.Duplicate {
		t.Errorf("Dispatch = %+v, want handled by this call: the activity ran again after its completion was given up", o.res)
	}
	onceEach(t, h, []string{req.Key()})
}
