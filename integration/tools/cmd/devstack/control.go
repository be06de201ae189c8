package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// The control socket: a running devstack listens on a unix socket in its scratch dir, where
// `devstack restart temporal` from another shell asks it to restart its Temporal server. The client
// finds it by envControl (in the env file and the printed lines: sourcing them points the client at
// that devstack) or, without it, as the one socket that answers under os.TempDir()/scratchPrefix*.
// One request per connection: a line `restart temporal <down>`, answered by JSON lines of progress
// and a last one with the result.
const (
	controlSocket = "control.sock"
	envControl    = "BATON_DEVSTACK_CONTROL"
	scratchPrefix = "baton-devstack-" // run's scratch dir, os.TempDir()/scratchPrefix*
	restartVerb   = "restart " + restartTarget
)

// controlReply is one line of the answer: a line of progress, or the last line (Done), with Err when
// the restart failed.
type controlReply struct {
	Say string `json:",omitempty"`
	// Down: the server is stopped and stays down for the request's down from now.
	Down bool   `json:",omitempty"`
	Done bool   `json:",omitempty"`
	Err  string `json:",omitempty"`
}

// control is the listening control socket; its requests go to serve.
type control struct {
	path     string
	ln       net.Listener
	requests chan restartRequest
	closing  chan struct{}
	wg       sync.WaitGroup
}

// listenControl listens on path.
func listenControl(path string) (*control, error) {
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, err
	}
	c := &control{path: path, ln: ln, requests: make(chan restartRequest), closing: make(chan struct{})}
	c.wg.Go(c.accept)
	return c, nil
}

func (c *control) accept() {
	for {
		conn, err := c.ln.Accept()
		if err != nil {
			return // closed
		}
		c.wg.Go(func() { c.handle(conn) })
	}
}

// handle answers one request: it hands it to serve, relays the progress and sends the result.
func (c *control) handle(conn net.Conn) {
	defer conn.Close()
	reply := json.NewEncoder(conn)
	// A client that sends nothing must not hold Close up for long.
	conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	line, err := bufio.NewReader(conn).ReadString('\n')
	var down time.Duration
	if err == nil {
		down, err = parseRequest(strings.TrimSpace(line))
	}
	if err != nil {
		reply.Encode(controlReply{Done: true, Err: err.Error()})
		return
	}
	done := make(chan error, 1)
	req := restartRequest{down: down, done: done, say: func(format string, a ...any) {
		reply.Encode(controlReply{Say: fmt.Sprintf(format, a...)}) // a client gone away misses it
	}, isDown: func() { reply.Encode(controlReply{Down: true}) }}
	select {
	case c.requests <- req:
		err = <-done
	case <-c.closing:
		err = errors.New("devstack is stopping")
	}
	r := controlReply{Done: true}
	if err != nil {
		r.Err = err.Error()
	}
	reply.Encode(r)
}

// parseRequest parses a request line: `restart temporal <down>`.
func parseRequest(line string) (time.Duration, error) {
	d, ok := strings.CutPrefix(line, restartVerb+" ")
	if !ok {
		return 0, fmt.Errorf("request %q: want %q", line, restartVerb+" <duration>")
	}
	down, err := time.ParseDuration(d)
	if err == nil && down < 0 {
		err = errors.New("want 0 or more")
	}
	if err != nil {
		return 0, fmt.Errorf("request %q: down time: %w", line, err)
	}
	return down, nil
}

// Close stops listening (the socket file goes with it) and waits for the requests under way: serve
// ends them before it stops, or they end with "devstack is stopping".
func (c *control) Close() error {
	close(c.closing)
	err := c.ln.Close()
	c.wg.Wait()
	return err
}

// requestRestart asks the devstack at socket to restart its Temporal server, keeping it down for
// down, writes the restart's progress to out as it comes, calls isDown (when not nil) once the server
// is stopped and kept down, and returns nil once the server serves again.
func requestRestart(socket string, down time.Duration, out io.Writer, isDown func()) error {
	conn, err := net.Dial("unix", socket)
	if err != nil {
		return fmt.Errorf("the devstack of %s does not answer (%v): is it still running?", socket, err)
	}
	defer conn.Close()
	if _, err := fmt.Fprintf(conn, "%s %v\n", restartVerb, down); err != nil {
		return err
	}
	dec := json.NewDecoder(conn)
	for {
		var r controlReply
		if err := dec.Decode(&r); err != nil {
			return fmt.Errorf("the devstack of %s went away before the restart was done: %w", socket, err)
		}
		switch {
		case r.Say != "":
			fmt.Fprintln(out, r.Say)
		case r.Down:
			if isDown != nil {
				isDown()
			}
		case r.Done && r.Err != "":
			return errors.New(r.Err)
		case r.Done:
			return nil
		}
	}
}

// findControl returns the control socket of the devstack to restart: envControl's, else the one
// that answers under os.TempDir(). It fails, saying what to do, when there is none or more than one.
func findControl() (string, error) {
	if p := os.Getenv(envControl); p != "" {
		return p, nil
	}
	pattern := filepath.Join(os.TempDir(), scratchPrefix+"*", controlSocket)
	paths, err := filepath.Glob(pattern)
	if err != nil {
		return "", err
	}
	var live []string
	for _, p := range paths {
		// Sockets of a devstack that was killed stay behind, answering nothing.
		if conn, err := net.DialTimeout("unix", p, time.Second); err == nil {
			conn.Close()
			live = append(live, p)
		}
	}
	switch len(live) {
	case 1:
		return live[0], nil
	case 0:
		return "", fmt.Errorf("no running devstack found: %s is not set and no socket answers at %s "+
			"(start one with make devstack)", envControl, pattern)
	default:
		return "", fmt.Errorf("%d devstacks run (%s): set %s to the one to restart (sourcing its env file does)",
			len(live), strings.Join(live, ", "), envControl)
	}
}
