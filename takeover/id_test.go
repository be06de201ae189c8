package takeover

import (
	"errors"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/baton-run/baton/names"
)

func TestWorkflowID(t *testing.T) {
	cases := []struct{ project, queue, want string }{
		{"billing", "orders", "dispatcher-billing-orders"},
		{"billing", "orders-v2", "dispatcher-billing-orders-v2"},
		{"billing", "zahlungsläufe", "dispatcher-billing-zahlungsläufe"},
	}
	for _, tc := range cases {
		got, err := WorkflowID(tc.project, tc.queue)
		if err != nil || got != tc.want {
			t.Errorf("WorkflowID(%q, %q) = %q, %v; want %q", tc.project, tc.queue, got, err, tc.want)
		}
	}
}

func TestWorkflowIDNeverCollides(t *testing.T) {
	pairs := [][2][2]string{
		{{"a-b", "c"}, {"a", "b-c"}},
		{{strings.Repeat("p", 200), strings.Repeat("q", 200)}, {strings.Repeat("p", 200), strings.Repeat("q", 199) + "r"}},
	}
	for _, p := range pairs {
		x, err1 := WorkflowID(p[0][0], p[0][1])
		y, err2 := WorkflowID(p[1][0], p[1][1])
		if err1 != nil || err2 != nil {
			t.Fatal(err1, err2)
		}
		if x == y {
			t.Errorf("%v and %v share the ID %q", p[0], p[1], x)
		}
	}
	long, _ := WorkflowID(strings.Repeat("p", 200), strings.Repeat("q", 200))
	if len(long) > MaxIDLength || !strings.HasPrefix(long, "dispatcher-ppp") || !strings.Contains(long, "/") {
		t.Errorf("long ID = %q (%d bytes)", long, len(long))
	}
	dashed, _ := WorkflowID("my-project", "default")
	if !strings.HasPrefix(dashed, "dispatcher-my-project-default/") {
		t.Errorf("a dashed project keeps the readable form before the hash: %q", dashed)
	}
}

func TestWorkflowIDRejectsBadNames(t *testing.T) {
	for _, tc := range []struct{ project, queue, field string }{
		{"", "q", "project"}, {"p", "", "queue"}, {"p/x", "q", "project"}, {"p", "q\x00", "queue"}, {"p", "a b", "queue"},
	} {
		_, err := WorkflowID(tc.project, tc.queue)
		if !errors.Is(err, ErrInvalidName) || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("WorkflowID(%q, %q) = %v, want ErrInvalidName naming %s", tc.project, tc.queue, err, tc.field)
		}
	}
}

// FuzzWorkflowID checks the ID builder on arbitrary names: a name is refused exactly when the shared
// name rules refuse it, with ErrInvalidName naming the field on one line; an accepted pair gets a
// bounded, valid UTF-8, stable ID in the plain form when that is unambiguous and fits, otherwise the
// plain form cut at a rune boundary plus '/' and 32 hex digits; distinct pairs never share an ID.
// The seed corpus is in testdata/fuzz/FuzzWorkflowID.
func FuzzWorkflowID(f *testing.F) {
	f.Add("billing", "orders", "billing", "orders-v2")
	f.Add("a-b", "c", "a", "b-c")
	f.Add(strings.Repeat("p", 200), strings.Repeat("q", 200), strings.Repeat("p", 200), strings.Repeat("q", 199))
	f.Add("ä-ö", "ü", "ä", "ö-ü")
	f.Fuzz(func(t *testing.T, p1, q1, p2, q2 string) {
		id1 := checkWorkflowID(t, p1, q1)
		id2 := checkWorkflowID(t, p2, q2)
		if id1 == "" || id2 == "" {
			return
		}
		if (p1 != p2 || q1 != q2) && id1 == id2 {
			t.Fatalf("(%q, %q) and (%q, %q) share %q", p1, q1, p2, q2, id1)
		}
	})
}

// checkWorkflowID asserts the properties of one WorkflowID call and returns the ID ("" if refused).
func checkWorkflowID(t *testing.T, project, queue string) string {
	t.Helper()
	id, err := WorkflowID(project, queue)
	perr, qerr := names.Check(project), names.Check(queue)
	if err != nil {
		switch {
		case !errors.Is(err, ErrInvalidName):
			t.Fatalf("WorkflowID(%q, %q) error %v does not wrap ErrInvalidName", project, queue, err)
		case perr == nil && qerr == nil:
			t.Fatalf("WorkflowID(%q, %q) refused valid names: %v", project, queue, err)
		case perr != nil && !strings.Contains(err.Error(), "project"), perr == nil && !strings.Contains(err.Error(), "queue"):
			t.Fatalf("WorkflowID(%q, %q) error %q does not name the field", project, queue, err)
		case strings.ContainsAny(err.Error(), "\n\r"):
			t.Fatalf("WorkflowID error spans lines: %q", err)
		}
		return ""
	}
	if perr != nil || qerr != nil {
		t.Fatalf("WorkflowID(%q, %q) = %q accepted an invalid name (%v, %v)", project, queue, id, perr, qerr)
	}
	if len(id) > MaxIDLength || !utf8.ValidString(id) || !strings.HasPrefix(id, "dispatcher-") {
		t.Fatalf("bad ID %q", id)
	}
	if again, _ := WorkflowID(project, queue); again != id {
		t.Fatalf("unstable ID for %q %q", project, queue)
	}
	plain := "dispatcher-" + project + "-" + queue
	if !strings.Contains(project, "-") && len(plain) <= MaxIDLength {
		if id != plain {
			t.Fatalf("WorkflowID(%q, %q) = %q, want the plain form %q", project, queue, id, plain)
		}
		return id
	}
	head, sum, ok := strings.Cut(id, "/")
	if !ok || len(sum) != 32 || strings.Trim(sum, "0123456789abcdef") != "" || !strings.HasPrefix(plain, head) {
		t.Fatalf("WorkflowID(%q, %q) = %q, want a prefix of %q, '/' and 32 hex digits", project, queue, id, plain)
	}
	return id
}

func TestWorkflowIDPrefix(t *testing.T) {
	for _, tc := range []struct{ project, queue string }{
		{"billing", "orders"}, {"a-b", "c"}, {strings.Repeat("p", 200), strings.Repeat("q", 200)}, {strings.Repeat("é", 100), "q"},
	} {
		id, err := WorkflowID(tc.project, tc.queue)
		if err != nil {
			t.Fatal(err)
		}
		if p := WorkflowIDPrefix(tc.project); !strings.HasPrefix(id, p) || !utf8.ValidString(p) {
			t.Errorf("WorkflowID(%.20q, %q) = %.40q does not start with its project prefix %.40q", tc.project, tc.queue, id, p)
		}
	}
}
