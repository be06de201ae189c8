package clients

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	commonpb "go.temporal.io/api/common/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
)

// countingConverter is a data converter the test can recognise and see used.
type countingConverter struct {
	converter.DataConverter
	encoded atomic.Int64
}

func newCountingConverter() *countingConverter {
	return &countingConverter{DataConverter: converter.GetDefaultDataConverter()}
}

func (c *countingConverter) ToPayload(v any) (*commonpb.Payload, error) {
	c.encoded.Add(1)
	return c.DataConverter.ToPayload(v)
}

func (c *countingConverter) ToPayloads(vs ...any) (*commonpb.Payloads, error) {
	c.encoded.Add(1)
	return c.DataConverter.ToPayloads(vs...)
}

// NewTemporal's client encodes with the app's converter, so that the memos Baton writes and reads go
// through one converter.
func TestTemporalClientUsesTheAppsDataConverter(t *testing.T) {
	f := startFrontend(t, nil)
	dc := newCountingConverter()
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
	if n := dc.encoded.Load(); n < 2 {
		t.Fatalf("the app's converter encoded %d payload(s), want the input and the memo", n)
	}
}
