package registry

import (
	"errors"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"
)

func goodRecord() map[string]string {
	return map[string]string{
		FieldServerID: "w-1", FieldQueue: "orders", FieldStatus: "ONLINE", FieldHostname: "pod-1",
		FieldPID: "42", FieldVersion: "1.0", FieldCapabilities: `["A","B"]`, FieldLabels: `{"region":"eu"}`,
		FieldMaxConcurrency: "10", FieldActive: "3", FieldTotalCompleted: "100", FieldTotalFailed: "2",
		FieldRegisteredMs: "1700000000000", FieldLastHeartbeat: "1700000001234", FieldVersionFormat: "1",
	}
}

func TestDecodeWorker(t *testing.T) {
	w, err := decodeWorker("k", "orders", "w-1", goodRecord())
	if err != nil {
		t.Fatal(err)
	}
	want := Worker{
		ServerID: "w-1", Queue: "orders", Status: StatusOnline, Hostname: "pod-1", PID: 42, Version: "1.0",
		Capabilities: []string{"A", "B"}, Labels: map[string]string{"region": "eu"}, MaxConcurrency: 10,
		Active: 3, TotalCompleted: 100, TotalFailed: 2,
		RegisteredAt: time.UnixMilli(1700000000000), LastHeartbeat: time.UnixMilli(1700000001234),
	}
	if !equalWorker(w, want) {
		t.Fatalf("decoded %+v\nwant    %+v", w, want)
	}
	if !w.HasCapability("B") || w.HasCapability("C") {
		t.Fatal("HasCapability")
	}

	off := goodRecord()
	off[FieldStatus], off[FieldDeregisteredMs], off[FieldEvictedBy] = "OFFLINE", "1700000009000", "77"
	w, err = decodeWorker("k", "orders", "w-1", off)
	if err != nil || !w.DeregisteredAt.Equal(time.UnixMilli(1700000009000)) || w.EvictedBy != 77 {
		t.Fatalf("offline record: %+v, %v", w, err)
	}
}

// A record tells how its worker went OFFLINE: evicted by a leader (evicted_by holds its token) or
// deregistered (no evicted_by); a live worker is neither.
func TestWorkerEvicted(t *testing.T) {
	for _, tc := range []struct {
		name      string
		status    string
		evictedBy string // "" leaves the field out
		want      bool
		wantToken int64
	}{
		{"evicted", "OFFLINE", "77", true, 77},
		{"deregistered", "OFFLINE", "", false, 0},
		{"online", "ONLINE", "", false, 0},
		{"draining", "DRAINING", "", false, 0},
		{"live with a stray token", "ONLINE", "77", false, 77},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := goodRecord()
			f[FieldStatus] = tc.status
			if tc.status == string(StatusOffline) {
				f[FieldDeregisteredMs] = "1700000009000"
			}
			if tc.evictedBy != "" {
				f[FieldEvictedBy] = tc.evictedBy
			}
			w, err := decodeWorker("k", "orders", "w-1", f)
			if err != nil {
				t.Fatal(err)
			}
			if w.Evicted() != tc.want || w.EvictedBy != tc.wantToken {
				t.Fatalf("Evicted() = %v, EvictedBy = %d; want %v, %d", w.Evicted(), w.EvictedBy, tc.want, tc.wantToken)
			}
		})
	}
}

func TestDecodeWorkerGarbage(t *testing.T) {
	cases := []struct {
		name   string
		modify func(f map[string]string)
		field  string
	}{
		{"unknown status", func(f map[string]string) { f[FieldStatus] = "ZOMBIE" }, FieldStatus},
		{"missing status", func(f map[string]string) { delete(f, FieldStatus) }, FieldStatus},
		{"non-numeric completed", func(f map[string]string) { f[FieldTotalCompleted] = "lots" }, FieldTotalCompleted},
		{"negative failed", func(f map[string]string) { f[FieldTotalFailed] = "-1" }, FieldTotalFailed},
		{"float active", func(f map[string]string) { f[FieldActive] = "1.5" }, FieldActive},
		{"huge active", func(f map[string]string) { f[FieldActive] = "99999999999" }, FieldActive},
		{"zero pid", func(f map[string]string) { f[FieldPID] = "0" }, FieldPID},
		{"missing heartbeat", func(f map[string]string) { delete(f, FieldLastHeartbeat) }, FieldLastHeartbeat},
		{"bad deregistered", func(f map[string]string) { f[FieldDeregisteredMs] = "yesterday" }, FieldDeregisteredMs},
		{"broken capabilities JSON", func(f map[string]string) { f[FieldCapabilities] = `["A",` }, FieldCapabilities},
		{"capabilities not strings", func(f map[string]string) { f[FieldCapabilities] = `[1,2]` }, FieldCapabilities},
		{"capabilities null", func(f map[string]string) { f[FieldCapabilities] = `null` }, FieldCapabilities},
		{"broken labels JSON", func(f map[string]string) { f[FieldLabels] = `{"a":` }, FieldLabels},
		{"labels an array", func(f map[string]string) { f[FieldLabels] = `["a"]` }, FieldLabels},
		{"missing labels", func(f map[string]string) { delete(f, FieldLabels) }, FieldLabels},
		{"other server ID", func(f map[string]string) { f[FieldServerID] = "w-2" }, FieldServerID},
		{"other queue", func(f map[string]string) { f[FieldQueue] = "payments" }, FieldQueue},
		{"future format", func(f map[string]string) { f[FieldVersionFormat] = "9" }, FieldVersionFormat},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := goodRecord()
			tc.modify(f)
			_, err := decodeWorker("baton:registry:{p}/w/orders/w-1", "orders", "w-1", f)
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("decode = %v, want ErrMalformed", err)
			}
			for _, want := range []string{`"baton:registry:{p}/w/orders/w-1"`, tc.field} {
				if !strings.Contains(err.Error(), want) {
					t.Fatalf("error %q does not name %q", err, want)
				}
			}
		})
	}
}

func TestKeysAndCursors(t *testing.T) {
	k := newKeys("baton:registry:", "billing")
	// A queue may contain ':' and '{': the '/' separators keep (queue, server ID) pairs apart.
	if a, b := k.worker("a:b", "c"), k.worker("a", "b:c"); a == b {
		t.Fatalf("keys collide: %s", a)
	}
	m := indexMember("orders", "w-1")
	q, id, ok := splitMember(m)
	if !ok || q != "orders" || id != "w-1" {
		t.Fatalf("splitMember(%q) = %q %q %v", m, q, id, ok)
	}
	for _, bad := range []string{"orders", "orders\x00", "\x00w", "a b\x00w", "q\x00w\x00x"} {
		if _, _, ok := splitMember(bad); ok {
			t.Fatalf("splitMember(%q) accepted garbage", bad)
		}
	}
	// Every entry of a queue sorts inside [queue\x00, queue\x01), and no entry of another queue does.
	for _, other := range []string{"order", "orders-eu", "ordersa", "orderr"} {
		o := indexMember(other, "w")
		if o >= "orders\x00" && o < "orders\x01" {
			t.Fatalf("entry of queue %q falls in the range of queue orders", other)
		}
	}
	c := encodeCursor(m)
	if got, err := decodeCursor(c); err != nil || got != m {
		t.Fatalf("cursor round trip: %q %v", got, err)
	}
	for _, bad := range []string{"!!!", encodeCursor("no-separator"), encodeCursor("a/b\x00c")} {
		if _, err := decodeCursor(bad); !errors.Is(err, ErrInvalidArgument) {
			t.Fatalf("decodeCursor(%q) = %v", bad, err)
		}
	}
}

func TestEncodeRegistration(t *testing.T) {
	r := validRegistration()
	r.Labels = nil
	caps, labels := encodeRegistration(r)
	f := goodRecord()
	f[FieldCapabilities], f[FieldLabels] = caps, labels
	w, err := decodeWorker("k", "orders", "w-1", f)
	if err != nil || !slices.Equal(w.Capabilities, r.Capabilities) || len(w.Labels) != 0 {
		t.Fatalf("round trip: %+v %v", w, err)
	}
}

func equalWorker(a, b Worker) bool {
	return a.ServerID == b.ServerID && a.Queue == b.Queue && a.Status == b.Status && a.Hostname == b.Hostname &&
		a.PID == b.PID && a.Version == b.Version && slices.Equal(a.Capabilities, b.Capabilities) &&
		maps.Equal(a.Labels, b.Labels) && a.MaxConcurrency == b.MaxConcurrency && a.Active == b.Active &&
		a.TotalCompleted == b.TotalCompleted && a.TotalFailed == b.TotalFailed &&
		a.RegisteredAt.Equal(b.RegisteredAt) && a.LastHeartbeat.Equal(b.LastHeartbeat) &&
		a.DeregisteredAt.Equal(b.DeregisteredAt) && a.EvictedBy == b.EvictedBy
}
