package heartbeat

import (
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/baton-run/baton/takeover"
)

func good() map[string]string {
	return map[string]string{
		FieldWorkflowID: "dispatcher-billing-orders", FieldRunID: "run-1", FieldServerID: "host-1",
		FieldToken: "42", FieldProject: "billing", FieldQueue: "orders", FieldUpdatedMs: "1700000000123", FieldVersion: "1",
	}
}

func TestDecode(t *testing.T) {
	if k := Key("", "billing", "dispatcher-billing-orders"); k != "dispatcher:heartbeat:{billing}/dispatcher-billing-orders" {
		t.Fatalf("Key = %s", k)
	}
	// The layout before per-project keys is still read (LegacyKey).
	if _, err := Decode(DefaultPrefix, LegacyKey("", "dispatcher-billing-orders"), good()); err != nil {
		t.Fatalf("Decode of the old layout's key: %v", err)
	}
	e, err := Decode(DefaultPrefix, Key("", "billing", "dispatcher-billing-orders"), good())
	if err != nil {
		t.Fatal(err)
	}
	if e.Token != 42 || e.RunID != "run-1" || e.ServerID != "host-1" || e.UpdatedMs != 1700000000123 ||
		!e.UpdatedAt.Equal(time.UnixMilli(1700000000123)) || e.Project != "billing" || e.Queue != "orders" {
		t.Fatalf("decoded %+v", e)
	}
	if age := e.Age(time.UnixMilli(1700000010123)); age != 10*time.Second {
		t.Fatalf("Age = %v", age)
	}
}

func TestDecodeRejectsGarbage(t *testing.T) {
	key := Key(DefaultPrefix, "billing", "dispatcher-billing-orders")
	cases := []struct {
		name  string
		key   string
		edit  func(m map[string]string)
		field string
	}{
		{"empty hash", key, func(m map[string]string) { clear(m) }, FieldWorkflowID},
		{"no run id", key, func(m map[string]string) { delete(m, FieldRunID) }, FieldRunID},
		{"control chars in server id", key, func(m map[string]string) { m[FieldServerID] = "a\nb" }, FieldServerID},
		{"token not a number", key, func(m map[string]string) { m[FieldToken] = "abc" }, FieldToken},
		{"token zero", key, func(m map[string]string) { m[FieldToken] = "0" }, FieldToken},
		{"token overflow", key, func(m map[string]string) { m[FieldToken] = "99999999999999999999" }, FieldToken},
		{"time garbage", key, func(m map[string]string) { m[FieldUpdatedMs] = "12:00" }, FieldUpdatedMs},
		{"time negative", key, func(m map[string]string) { m[FieldUpdatedMs] = "-5" }, FieldUpdatedMs},
		{"project with slash", key, func(m map[string]string) { m[FieldProject] = "a/b" }, FieldProject},
		{"queue empty", key, func(m map[string]string) { m[FieldQueue] = "" }, FieldQueue},
		{"workflow id of another workflow", key, func(m map[string]string) { m[FieldWorkflowID] = "payments-cron" }, FieldWorkflowID},
		{"workflow id of another queue", key, func(m map[string]string) { m[FieldQueue] = "invoices" }, FieldWorkflowID},
		{"key of another workflow", Key(DefaultPrefix, "billing", "dispatcher-billing-other"), func(map[string]string) {}, "key"},
		{"key of another project", Key(DefaultPrefix, "payments", "dispatcher-billing-orders"), func(map[string]string) {}, "key"},
		{"old key of another workflow", LegacyKey(DefaultPrefix, "dispatcher-billing-other"), func(map[string]string) {}, "key"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m := good()
			tc.edit(m)
			_, err := Decode(DefaultPrefix, tc.key, m)
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("Decode = %v, want ErrMalformed", err)
			}
			if !strings.Contains(err.Error(), tc.field) || !strings.Contains(err.Error(), "key ") {
				t.Fatalf("Decode = %q, want it to name the key and %s", err, tc.field)
			}
		})
	}
}

// FuzzDecode feeds Decode arbitrary hashes and keys: it never panics; a refusal wraps ErrMalformed
// and names the key on one line; an accepted entry is exactly what this package writes (the workflow
// ID is the dispatcher ID of its project and queue, the key is Key or LegacyKey of them, the token and
// time are positive and as stored). The seed corpus is in testdata/fuzz/FuzzDecode.
func FuzzDecode(f *testing.F) {
	f.Add("dispatcher:heartbeat:dispatcher-billing-orders", "dispatcher-billing-orders", "run", "srv", "42", "billing", "orders", "1700000000000")
	f.Add("", "", "", "", "", "", "", "")
	f.Add("dispatcher:heartbeat:dispatcher-a-b", "dispatcher-a-b", "r", "s", "-1", "a", "b", "x")
	f.Fuzz(func(t *testing.T, key, wf, run, srv, token, project, queue, ms string) {
		// Half of the time the workflow ID and the key are the ones the names call for, so that the
		// fuzzer reaches accepted entries and explores their other fields.
		if id, err := takeover.WorkflowID(project, queue); err == nil && len(srv)%2 == 0 {
			wf = id
		}
		m := map[string]string{FieldWorkflowID: wf, FieldRunID: run, FieldServerID: srv, FieldToken: token,
			FieldProject: project, FieldQueue: queue, FieldUpdatedMs: ms}
		switch len(key) % 4 {
		case 0:
			key = Key(DefaultPrefix, project, wf)
		case 2:
			key = LegacyKey(DefaultPrefix, wf)
		}
		e, err := Decode(DefaultPrefix, key, m)
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("error %v does not wrap ErrMalformed", err)
			}
			if !strings.Contains(err.Error(), "key ") || strings.ContainsAny(err.Error(), "\n\r") {
				t.Fatalf("error %q does not name the key on one line", err)
			}
			return
		}
		want, werr := takeover.WorkflowID(project, queue)
		switch {
		case werr != nil || e.WorkflowID != want || e.WorkflowID != wf:
			t.Fatalf("accepted workflow ID %q for project %q queue %q (want %q, %v)", e.WorkflowID, project, queue, want, werr)
		case e.Key != key || key != Key(DefaultPrefix, project, wf) && key != LegacyKey(DefaultPrefix, wf):
			t.Fatalf("accepted key %q for workflow %q", key, wf)
		case e.Token <= 0 || e.Token != parseInt(token):
			t.Fatalf("accepted token %d from %q", e.Token, token)
		case e.UpdatedMs <= 0 || e.UpdatedMs != parseInt(ms) || !e.UpdatedAt.Equal(time.UnixMilli(e.UpdatedMs)):
			t.Fatalf("accepted time %d / %v from %q", e.UpdatedMs, e.UpdatedAt, ms)
		case e.RunID != run || e.ServerID != srv || e.Project != project || e.Queue != queue:
			t.Fatalf("decoded %+v from %v", e, m)
		case run == "" || srv == "" || strings.ContainsFunc(run+srv, func(r rune) bool { return r < 0x20 || r == 0x7f }):
			t.Fatalf("accepted run %q server %q", run, srv)
		}
	})
}

func parseInt(s string) int64 {
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return -1
	}
	return n
}

func TestConfigValidate(t *testing.T) {
	if err := (Config{}).Validate(); err != nil {
		t.Fatalf("defaults must validate: %v", err)
	}
	c := Config{}.WithDefaults()
	if c.Prefix != DefaultPrefix || c.Interval != 10*time.Second || c.KeyTTL != time.Hour || c.Timeout != 5*time.Second {
		t.Fatalf("defaults: %+v", c)
	}
	cases := []struct {
		name  string
		cfg   Config
		field string
		rule  string
	}{
		{"glob in prefix", Config{Prefix: "hb:*"}, "Prefix", "glob"},
		{"space in prefix", Config{Prefix: "hb :"}, "Prefix", "white space"},
		{"interval too short", Config{Interval: time.Millisecond}, "Interval", "at least 100ms"},
		{"ttl too short", Config{Interval: time.Second, KeyTTL: 5 * time.Second}, "KeyTTL", "10 × Interval"},
		{"timeout above interval", Config{Interval: time.Second, Timeout: 2 * time.Second}, "Timeout", "at most Interval"},
		{"negative timeout", Config{Timeout: -1}, "Timeout", "positive"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.cfg.Validate()
			if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), tc.field+" ") || !strings.Contains(err.Error(), tc.rule) {
				t.Fatalf("Validate() = %v, want ErrInvalidConfig naming %s and %q", err, tc.field, tc.rule)
			}
		})
	}
	if _, err := NewWriter(nil, Config{}); !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("NewWriter(nil) = %v", err)
	}
}
