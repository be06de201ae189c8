package registry

import (
	"errors"
	"strconv"
	"strings"
	"testing"
)

// recordFields is the order in which FuzzDecodeWorker's arguments fill a record.
var recordFields = []string{
	FieldServerID, FieldQueue, FieldStatus, FieldHostname, FieldPID, FieldVersion, FieldCapabilities, FieldLabels,
	FieldMaxConcurrency, FieldActive, FieldTotalCompleted, FieldTotalFailed, FieldRegisteredMs, FieldLastHeartbeat,
	FieldDeregisteredMs, FieldEvictedBy, FieldVersionFormat,
}

// FuzzDecodeWorker feeds the record decoder arbitrary hashes: it never panics; a refusal wraps
// ErrMalformed and names the key on one line; an accepted record satisfies every rule of the
// registry (a known status, counts and times in range, JSON fields present, the key's queue and
// server ID) and decodes to the same worker again once written back. absent has one bit per field
// of recordFields: a set bit leaves the field out of the hash. The seed corpus is in
// testdata/fuzz/FuzzDecodeWorker.
func FuzzDecodeWorker(f *testing.F) {
	f.Add("orders", "w-1", uint32(0), "w-1", "orders", "ONLINE", "pod-1", "42", "1.0", `["A","B"]`, `{"region":"eu"}`,
		"10", "3", "100", "2", "1700000000000", "1700000001234", "", "", "1")
	f.Add("orders", "w-1", uint32(0), "w-1", "orders", "OFFLINE", "pod-1", "42", "1.0", `[]`, `null`,
		"10", "0", "0", "0", "1700000000000", "1700000001234", "1700000009000", "77", "1")
	f.Add("", "", uint32(1<<21-1), "", "", "", "", "", "", "", "", "", "", "", "", "", "", "", "", "")
	f.Fuzz(func(t *testing.T, queue, serverID string, absent uint32, serverIDField, queueField, status, hostname,
		pid, version, capabilities, labels, maxConcurrency, active, completed, failed, registered, heartbeat,
		deregistered, evictedBy, format string) {
		values := []string{serverIDField, queueField, status, hostname, pid, version, capabilities, labels,
			maxConcurrency, active, completed, failed, registered, heartbeat, deregistered, evictedBy, format}
		rec := map[string]string{}
		for i, k := range recordFields {
			if absent&(1<<i) == 0 {
				rec[k] = values[i]
			}
		}
		// Most of the time the record is of the key's worker, so that accepted records are reached.
		if absent&(1<<20) == 0 {
			rec[FieldServerID], rec[FieldQueue] = serverID, queue
		}
		key := "baton:registry:{p}/w/" + queue + "/" + serverID
		w, err := decodeWorker(key, queue, serverID, rec)
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("error %v does not wrap ErrMalformed", err)
			}
			if !strings.Contains(err.Error(), "key ") || strings.ContainsAny(err.Error(), "\n\r") {
				t.Fatalf("error %q does not name the key on one line", err)
			}
			return
		}
		checkWorker(t, w, queue, serverID, rec)
		again, err := decodeWorker(key, queue, serverID, encodeWorker(w))
		if err != nil || !equalWorker(w, again) {
			t.Fatalf("written back, %+v decodes to %+v, %v", w, again, err)
		}
	})
}

func checkWorker(t *testing.T, w Worker, queue, serverID string, rec map[string]string) {
	t.Helper()
	switch {
	case w.Queue != queue || w.ServerID != serverID:
		t.Fatalf("accepted a record of %q/%q for %q/%q", w.Queue, w.ServerID, queue, serverID)
	case !w.Status.Valid():
		t.Fatalf("accepted status %q", w.Status)
	case w.Capabilities == nil || w.Labels == nil:
		t.Fatalf("accepted nil capabilities or labels: %+v", w)
	case w.PID < 1 || w.PID > maxHeartbeatCounter || w.MaxConcurrency < 1 || w.MaxConcurrency > maxHeartbeatCounter ||
		w.Active < 0 || w.Active > maxHeartbeatCounter:
		t.Fatalf("accepted pid %d, max concurrency %d, active %d", w.PID, w.MaxConcurrency, w.Active)
	case w.TotalCompleted < 0 || w.TotalFailed < 0 || w.EvictedBy < 0:
		t.Fatalf("accepted negative counts: %+v", w)
	case w.RegisteredAt.UnixMilli() < 1 || w.LastHeartbeat.UnixMilli() < 1:
		t.Fatalf("accepted times %v %v", w.RegisteredAt, w.LastHeartbeat)
	case rec[FieldHostname] != w.Hostname || rec[FieldVersion] != w.Version:
		t.Fatalf("hostname or version changed: %+v", w)
	}
	if v, ok := rec[FieldVersionFormat]; ok && v != formatVersion {
		t.Fatalf("accepted format version %q", v)
	}
}

// encodeWorker renders a worker as the registry's scripts store it.
func encodeWorker(w Worker) map[string]string {
	caps, labels := encodeRegistration(Registration{Capabilities: w.Capabilities, Labels: w.Labels})
	rec := map[string]string{
		FieldServerID: w.ServerID, FieldQueue: w.Queue, FieldStatus: string(w.Status), FieldHostname: w.Hostname,
		FieldPID: strconv.Itoa(w.PID), FieldVersion: w.Version, FieldCapabilities: caps, FieldLabels: labels,
		FieldMaxConcurrency: strconv.Itoa(w.MaxConcurrency), FieldActive: strconv.Itoa(w.Active),
		FieldTotalCompleted: strconv.FormatInt(w.TotalCompleted, 10), FieldTotalFailed: strconv.FormatInt(w.TotalFailed, 10),
		FieldRegisteredMs: strconv.FormatInt(w.RegisteredAt.UnixMilli(), 10), FieldLastHeartbeat: strconv.FormatInt(w.LastHeartbeat.UnixMilli(), 10),
		FieldVersionFormat: formatVersion,
	}
	if !w.DeregisteredAt.IsZero() {
		rec[FieldDeregisteredMs] = strconv.FormatInt(w.DeregisteredAt.UnixMilli(), 10)
	}
	if w.EvictedBy != 0 {
		rec[FieldEvictedBy] = strconv.FormatInt(w.EvictedBy, 10)
	}
	return rec
}
