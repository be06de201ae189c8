// Package loadreport is what `demo-worker load -json` prints: one Summary per line on standard
// output, every -interval while it sends and once at the end, so that tools (the drill, the e2e tests)
// read typed counts instead of parsing the human summary lines, which may change.
package loadreport

import (
	"encoding/json"
	"strings"
	"time"
)

// Summary is one summary of a load run.
type Summary struct {
	// Final is true for the last summary, printed once sending has ended (and the ledger was read).
	Final bool `json:"final"`
	// Elapsed is the time since sending began.
	Elapsed time.Duration `json:"elapsed_ns"`
	// Mode is "signal" or "dispatch".
	Mode string `json:"mode"`
	// Sent and Accepted count requests sent and taken by Temporal (in dispatch mode: recorded handled
	// as Dispatch returned). Waited counts arrivals that waited for one of the -in-flight slots.
	Sent     int64 `json:"sent"`
	Accepted int64 `json:"accepted"`
	Waited   int64 `json:"waited"`
	// Retries counts sends retried until Temporal accepted them (signal mode).
	Retries int64 `json:"retries,omitempty"`
	// Handled, Unsettled, Rejected and Errors are dispatch mode's outcomes of Producer.Dispatch.
	Handled   int64 `json:"handled,omitempty"`
	Unsettled int64 `json:"unsettled,omitempty"`
	Rejected  int64 `json:"rejected,omitempty"`
	Errors    int64 `json:"errors,omitempty"`
	// Ledger is what the dispatch ledger says of the accepted requests (final summary, with etcd
	// given); UnsettledLedger of the unsettled ones (dispatch mode).
	Ledger          *Ledger `json:"ledger,omitempty"`
	UnsettledLedger *Ledger `json:"unsettled_ledger,omitempty"`
	// LedgerError says why the ledger could not be read, if it could not.
	LedgerError string `json:"ledger_error,omitempty"`
}

// Ledger is what the dispatch ledger says about a set of requests.
type Ledger struct {
	Accepted int `json:"accepted"`
	Handled  int `json:"handled"`
	// NotHandled have no done record: lost, unless still on their way.
	NotHandled int `json:"not_handled"`
	// HandledTwice became done more than once since the load began.
	HandledTwice int `json:"handled_twice"`
}

// Parse returns the Summary on line, and false for any other line.
func Parse(line string) (Summary, bool) {
	var s Summary
	if !strings.HasPrefix(line, "{") || json.Unmarshal([]byte(line), &s) != nil || s.Mode == "" {
		return Summary{}, false
	}
	return s, true
}

// Last returns the last Summary in output (one line each), and false when there is none.
func Last(output string) (Summary, bool) {
	lines := strings.Split(output, "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if s, ok := Parse(strings.TrimSpace(lines[i])); ok {
			return s, true
		}
	}
	return Summary{}, false
}
