package event_test

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/baton-run/baton/event"
)

// The JSON field names are what tools read: a rename is a breaking change, and this test says so.
func TestEventJSONFieldNames(t *testing.T) {
	at := time.Date(2026, 11, 28, 1, 2, 3, 4000, time.UTC)
	e := event.Event{Kind: event.TakenOver, At: at, Project: "p", Queue: "q", ServerID: "w1", Key: "/k", Token: 7,
		Started: at, WorkflowID: "dispatcher-p-q", RunID: "r2", PriorRunID: "r1", DispatchKey: "d", Peer: "w0",
		PeerToken: 5, Reason: "terminate-first", Err: "boom"}
	b, err := json.Marshal(e)
	if err != nil {
		t.Fatal(err)
	}
	const want = `{"event":"baton.takeover.taken_over","at":"2026-11-28T01:02:03.000004Z","project":"p","queue":"q",` +
		`"server_id":"w1","key":"/k","token":7,"started":"2026-11-28T01:02:03.000004Z","workflow_id":"dispatcher-p-q",` +
		`"run_id":"r2","prior_run_id":"r1","dispatch_key":"d","peer":"w0","peer_token":5,"reason":"terminate-first","error":"boom"}`
	if string(b) != want {
		t.Fatalf("an Event encodes as\n%s\nwant\n%s", b, want)
	}
	var back event.Event
	if err := json.Unmarshal(b, &back); err != nil || back != e {
		t.Fatalf("decoded %+v (%v), want %+v", back, err, e)
	}
	if b, _ := json.Marshal(event.Event{Kind: event.HeartbeatRecovered, At: at}); string(b) != `{"event":"baton.heartbeat.recovered","at":"2026-11-28T01:02:03.000004Z"}` {
		t.Fatalf("empty fields are not left out: %s", b)
	}
}

func TestNilSinkDrops(t *testing.T) {
	var s event.Sink
	s.Emit(event.Event{Kind: event.TermStarted}) // no panic
	var got []event.Event
	s = func(e event.Event) { got = append(got, e) }
	s.Emit(event.Event{Kind: event.TermStarted})
	if len(got) != 1 {
		t.Fatalf("got %d events, want 1", len(got))
	}
	if event.ErrText(nil) != "" || event.ErrText(errors.New("x")) != "x" {
		t.Fatal("ErrText")
	}
}
