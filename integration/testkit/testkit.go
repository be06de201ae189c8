// Package testkit holds the small helpers the integration test packages share.
package testkit

import (
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
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

// EnvLogDir names the environment variable with the directory where server logs are written
// (default: the system's temporary directory).
const EnvLogDir = "BATON_TEST_LOG_DIR"

// LogFile is a file that a server started for tests logs into, at Info level: removed when the
// tests that used the server passed, kept (and named in their output) when one failed.
type LogFile struct {
	Path   string
	Logger *zap.Logger
	file   *os.File
}

// NewLogFile creates the log file of the server name (e.g. "etcd") in EnvLogDir.
func NewLogFile(name string) (*LogFile, error) {
	f, err := os.CreateTemp(os.Getenv(EnvLogDir), "baton-"+name+"-*.log")
	if err != nil {
		return nil, fmt.Errorf("testkit: server log: %w", err)
	}
	enc := zap.NewProductionEncoderConfig()
	enc.EncodeTime = zapcore.ISO8601TimeEncoder
	core := zapcore.NewCore(zapcore.NewConsoleEncoder(enc), zapcore.Lock(f), zap.InfoLevel)
	return &LogFile{Path: f.Name(), Logger: zap.New(core), file: f}, nil
}

// Close closes the file, after the server has stopped, and removes it unless keep is set.
func (l *LogFile) Close(keep bool) error {
	_ = l.Logger.Sync()
	err := l.file.Close()
	if !keep {
		err = errors.Join(err, os.Remove(l.Path))
	}
	return err
}

// ServerLog is NewLogFile for a server that lives as long as t: t fails if the file cannot be made;
// the returned cleanup, to be called by the test's cleanup once the server has stopped, keeps the
// file and names it in t's output when t failed.
func ServerLog(t testing.TB, name string) (*LogFile, func()) {
	t.Helper()
	l, err := NewLogFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return l, func() {
		if t.Failed() {
			t.Logf("%s server log kept: %s", name, l.Path)
		}
		if err := l.Close(t.Failed()); err != nil {
			t.Error(err)
		}
	}
}
