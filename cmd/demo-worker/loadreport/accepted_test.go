package loadreport

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// What Line writes, ReadAccepted reads back; anything else is refused.
func TestAcceptedRoundTrip(t *testing.T) {
	want := []Accepted{
		{Key: "k1", Queue: "q1", Sent: time.Unix(0, 1000), AcceptedTime: time.Unix(0, 2000)},
		{Key: "k2", Queue: "q2", Sent: time.Unix(0, 3000), AcceptedTime: time.Unix(0, 5000)},
	}
	path := filepath.Join(t.TempDir(), "accepted")
	if err := os.WriteFile(path, []byte(want[0].Line()+want[1].Line()), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := ReadAccepted(path)
	if err != nil || len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("ReadAccepted = %+v, %v; want %+v", got, err, want)
	}
	if err := os.WriteFile(path, []byte("k1 q1 1000\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadAccepted(path); err == nil {
		t.Fatal("a line of three fields was read")
	}
}
