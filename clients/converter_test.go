package clients

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/baton-run/baton/internal/testconverter"
)

// NewTemporal's client encodes with the app's converter, so that the memos Baton writes and reads go
// through one converter.
func TestTemporalClientUsesTheAppsDataConverter(t *testing.T) {
	f := startFrontend(t, nil)
	dc := testconverter.New()
	tc, err := NewTemporal(Config{EtcdEndpoints: []string{"e:2379"}, TemporalAddress: f.addr}, nil, dc)
	if err != nil {
		t.Fatal(err)
	}
	defer tc.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	// The stand-in frontend does not implement starts: the call fails after the client encoded the
	// input and the memo.
	_, err = tc.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: "dispatcher-billing-orders", TaskQueue: "orders",
		Memo: map[string]any{"baton.owner": "w1"}}, "baton.Dispatcher", "input")
	if err == nil || errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("ExecuteWorkflow = %v, want the frontend's refusal", err)
	}
	if n := dc.Encoded(); n < 2 {
		t.Fatalf("the app's converter encoded %d payload(s), want the input and the memo", n)
	}
}
