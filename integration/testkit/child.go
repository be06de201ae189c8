package testkit

import (
	"os/exec"
	"syscall"
	"time"
)

// Child is a server process that a test, a benchmark or a tool started: in a process group of its
// own, so that a Ctrl-C reaches its starter first, which stops it.
type Child struct {
	cmd    *exec.Cmd
	exited chan struct{}
}

// StartChild starts cmd (its SysProcAttr, if any, gains Setpgid) and waits for it in the background.
func StartChild(cmd *exec.Cmd) (*Child, error) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Setpgid = true
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	c := &Child{cmd: cmd, exited: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(c.exited) }()
	return c, nil
}

// Pid is the process's ID.
func (c *Child) Pid() int { return c.cmd.Process.Pid }

// Exited is closed once the process has exited and been waited for.
func (c *Child) Exited() <-chan struct{} { return c.exited }

// Stop sends sig and waits for the process to exit; one still running after grace is killed.
func (c *Child) Stop(sig syscall.Signal, grace time.Duration) {
	_ = c.cmd.Process.Signal(sig)
	select {
	case <-c.exited:
	case <-time.After(grace):
		_ = c.cmd.Process.Kill()
		<-c.exited
	}
}
