// Package testkit holds the small helpers the integration test packages share.
package testkit

import (
	"testing"
	"time"
)

// Eventually polls f every 20 ms until it returns nil, and fails the test with what and f's last
// error when d passes first. Tests wait on events this way, never on a guessed sleep.
func Eventually(t testing.TB, d time.Duration, what string, f func() error) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v: %v", what, d, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
