package takeover

import (
	"errors"
	"strings"
	"testing"
	"unicode/utf8"
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

// FuzzWorkflowID checks that distinct valid inputs never share an ID and that every ID is bounded,
// valid UTF-8 and stable.
func FuzzWorkflowID(f *testing.F) {
	f.Add("billing", "orders", "billing", "orders-v2")
	f.Add("a-b", "c", "a", "b-c")
	f.Add(strings.Repeat("p", 200), strings.Repeat("q", 200), strings.Repeat("p", 200), strings.Repeat("q", 199))
	f.Add("ä-ö", "ü", "ä", "ö-ü")
	f.Fuzz(func(t *testing.T, p1, q1, p2, q2 string) {
		id1, err1 := WorkflowID(p1, q1)
		id2, err2 := WorkflowID(p2, q2)
		for _, c := range []struct {
			id  string
			err error
		}{{id1, err1}, {id2, err2}} {
			if c.err != nil {
				continue
			}
			if len(c.id) > MaxIDLength || !utf8.ValidString(c.id) || !strings.HasPrefix(c.id, "dispatcher-") {
				t.Fatalf("bad ID %q", c.id)
			}
		}
		if err1 != nil || err2 != nil {
			return
		}
		if again, _ := WorkflowID(p1, q1); again != id1 {
			t.Fatalf("unstable ID for %q %q", p1, q1)
		}
		if (p1 != p2 || q1 != q2) && id1 == id2 {
			t.Fatalf("(%q, %q) and (%q, %q) share %q", p1, q1, p2, q2, id1)
		}
	})
}
