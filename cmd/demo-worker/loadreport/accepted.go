package loadreport

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// Accepted is one line of `demo-worker load -accepted-out`: a request Temporal accepted (in dispatch
// mode, one whose Dispatch call returned handled), when it was sent and when it was accepted.
type Accepted struct {
	Key, Queue         string
	Sent, AcceptedTime time.Time
}

// Line is the request's line in the file: "<key> <queue> <sent unix ns> <accepted unix ns>".
func (a Accepted) Line() string {
	return fmt.Sprintf("%s %s %d %d\n", a.Key, a.Queue, a.Sent.UnixNano(), a.AcceptedTime.UnixNano())
}

// ReadAccepted reads an -accepted-out file; a line that Line did not write is an error naming it.
func ReadAccepted(path string) ([]Accepted, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var out []Accepted
	for i, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if line == "" {
			continue
		}
		f := strings.Fields(line)
		if len(f) != 4 {
			return nil, fmt.Errorf("%s line %d: %q, want <key> <queue> <sent_ns> <accepted_ns>", path, i+1, line)
		}
		sent, err := strconv.ParseInt(f[2], 10, 64)
		if err != nil {
			return nil, fmt.Errorf("%s line %d: sent_ns: %w", path, i+1, err)
		}
		acc, err := strconv.ParseInt(f[3], 10, 64)
		if err != nil {
			return nil, fmt.Errorf("%s line %d: accepted_ns: %w", path, i+1, err)
		}
		out = append(out, Accepted{Key: f[0], Queue: f[1], Sent: time.Unix(0, sent), AcceptedTime: time.Unix(0, acc)})
	}
	return out, nil
}
