package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"
)

// With every server down, status still prints a row per queue, "?" in every column, a warning per
// source, exits 1 (etcd did not answer) and within a few timeouts, not one per queue.
func TestStatusWithEveryServerDown(t *testing.T) {
	addr := closedAddr(t)
	setEnv(t, map[string]string{
		"BATON_ETCD_ENDPOINTS":   "http://" + addr,
		"BATON_TEMPORAL_ADDRESS": addr,
		"BATON_REDIS_ADDR":       addr,
		"BATON_ETCD_USERNAME":    "-",
		"BATON_ETCD_PASSWORD":    "-",
		"BATON_QUEUES":           "q1,q2,q3,q4,q5",
	})
	var stdout, stderr bytes.Buffer
	began := time.Now()
	code := run(context.Background(), []string{"status", "-timeout=300ms"}, &stdout, &stderr)
	took := time.Since(began)
	if code != exitUnclean {
		t.Errorf("exit code %d, want %d", code, exitUnclean)
	}
	if took > 3*time.Second {
		t.Errorf("took %v: the calls of a source that is down are not skipped", took)
	}
	out := stdout.String()
	for _, q := range []string{"q1", "q5"} {
		if !unknownRow(out, q) {
			t.Errorf("no unknown row for %s:\n%s", q, out)
		}
	}
	for _, w := range []string{"reconciler leader: ?", "warning: etcd unavailable", "warning: temporal unavailable", "warning: redis unavailable"} {
		if !strings.Contains(out, w) {
			t.Errorf("output lacks %q:\n%s", w, out)
		}
	}
	if stderr.Len() > 0 {
		t.Errorf("stderr not empty: %s", stderr.String())
	}
	assertNoSecrets(t, "status", out)
}

// unknownRow says whether out has a row for queue whose every cell is "?".
func unknownRow(out, queue string) bool {
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) < 2 || f[0] != queue {
			continue
		}
		for _, cell := range f[1:] {
			if cell != "?" {
				return false
			}
		}
		return true
	}
	return false
}
