package harness

import (
	"bytes"
	"sync"
)

// Output is a process's or a goroutine's output, written by one goroutine (exec's copying goroutines,
// a server's serve loop) and read by the test at any time. The zero value is ready.
type Output struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

// Write appends p.
func (o *Output) Write(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.buf.Write(p)
}

// String returns what was written so far.
func (o *Output) String() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.buf.String()
}
