package main

import (
	"bytes"
	"strings"
	"testing"
)

func TestExitCodes(t *testing.T) {
	for _, c := range []struct {
		dirs []string
		code int
		out  string
	}{
		{[]string{"../../../overlays/dev", "../../../overlays/production"}, 0, "production: ok"},
		{[]string{"../../testdata/bad/grace"}, 1, "grace: Deployment/baton-worker"},
		{[]string{"../../testdata/nonexistent"}, 2, "kustomize build"},
		{nil, 2, "usage"},
	} {
		var stdout, stderr bytes.Buffer
		if code := run(c.dirs, &stdout, &stderr); code != c.code || !strings.Contains(stdout.String()+stderr.String(), c.out) {
			t.Errorf("validate %v: exit %d, output %q; want %d and %q", c.dirs, code, stdout.String()+stderr.String(), c.code, c.out)
		}
	}
}
