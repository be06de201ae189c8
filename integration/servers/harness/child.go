package harness

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"sync"
	"syscall"
	"time"
)

// Child runs the process of a server that a test, a benchmark or a tool started, stopped and may
// start again: in a process group of its own, so that a Ctrl-C reaches its starter first, which
// stops it. The zero value runs nothing.
type Child struct {
	mu     sync.Mutex
	cmd    *exec.Cmd // nil while nothing runs
	exited chan struct{}
}

// Start starts cmd (its SysProcAttr, if any, gains Setpgid) and returns once ready, which is given a
// channel closed when the process exits, returns; when ready fails, the process is killed.
func (c *Child) Start(cmd *exec.Cmd, ready func(exited <-chan struct{}) error) error {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Setpgid = true
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", cmd.Path, err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	c.mu.Lock()
	c.cmd, c.exited = cmd, exited
	c.mu.Unlock()
	if err := ready(exited); err != nil {
		c.Stop(syscall.SIGKILL, time.Minute)
		return err
	}
	return nil
}

// Pid is the running process's ID; 0 when none runs.
func (c *Child) Pid() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cmd == nil {
		return 0
	}
	return c.cmd.Process.Pid
}

// Stop sends sig to the running process, if any, and waits for it to exit; one still running after
// grace is killed.
func (c *Child) Stop(sig syscall.Signal, grace time.Duration) {
	c.mu.Lock()
	cmd, exited := c.cmd, c.exited
	c.cmd = nil
	c.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(sig)
	select {
	case <-exited:
	case <-time.After(grace):
		_ = cmd.Process.Kill()
		<-exited
	}
}

// GoBuild builds the package pkg of the module in dir into the user's cache directory, one binary per
// checkout of the module and package, and returns the binary's path. go build runs under a file lock,
// so that processes started together build it once, and does nothing when the binary is up to date.
func GoBuild(dir, pkg string) (string, error) {
	cache, err := os.UserCacheDir()
	if err != nil {
		return "", err
	}
	name := path.Base(pkg)
	out := filepath.Join(cache, "baton", fmt.Sprintf("%s-%x", name, sha256.Sum256([]byte(dir+" "+pkg)))[:len(name)+13])
	if err := os.MkdirAll(out, 0o755); err != nil {
		return "", err
	}
	lock, err := os.OpenFile(filepath.Join(out, "lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return "", err
	}
	defer lock.Close() // and with it the lock
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return "", err
	}
	bin := filepath.Join(out, name)
	cmd := exec.Command("go", "build", "-o", bin, pkg)
	// Its work directory next to the binary: the new binary is renamed into place, never written
	// over one that a process is running.
	cmd.Dir, cmd.Env = dir, append(os.Environ(), "GOTMPDIR="+out)
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build %s: %w: %s", pkg, err, bytes.TrimSpace(b))
	}
	return bin, nil
}
