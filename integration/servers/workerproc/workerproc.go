// Package workerproc builds and runs demo-worker processes and reads their HTTP endpoints, for the
// demo, the drill and the process-level tests (end-to-end, security).
package workerproc

import (
	"encoding/json"
	"net/http"
	"time"

	"github.com/baton-run/baton"
	"github.com/baton-run/baton/cmd/demo-worker/contract"
)

var httpClient = &http.Client{Timeout: time.Second}

// Status reads /status at addr (host:port); false while the process cannot answer.
func Status(addr string) (baton.Status, bool) {
	resp, err := httpClient.Get("http://" + addr + contract.PathStatus)
	if err != nil {
		return baton.Status{}, false
	}
	defer resp.Body.Close()
	var st baton.Status
	if resp.StatusCode != http.StatusOK || json.NewDecoder(resp.Body).Decode(&st) != nil {
		return baton.Status{}, false
	}
	return st, true
}

// Ready reports whether /readyz at addr answers 200.
func Ready(addr string) bool {
	resp, err := httpClient.Get("http://" + addr + contract.PathReady)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// Leading returns the queue's status when the process leads it with a dispatcher run.
func Leading(st baton.Status, queue string) (baton.QueueStatus, bool) {
	for _, q := range st.Queues {
		if q.Queue == queue && q.Leading && q.RunID != "" {
			return q, true
		}
	}
	return baton.QueueStatus{}, false
}
