package main

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"syscall"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
)

// A server given fd:N serves on the listening socket it inherited as descriptor N: whoever started
// the process bound the port, so nothing can take it in between.
func TestServesOnAnInheritedSocket(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f, err := l.(*net.TCPListener).File()
	if err != nil {
		t.Fatal(err)
	}
	// A descriptor of its own, as a child process inherits it: the server takes it over and closes it.
	fd, err := syscall.Dup(int(f.Fd()))
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	h := newMetricsServer(fmt.Sprintf("fd:%d", fd), prometheus.NewRegistry(), zap.NewNop())
	if err := h.start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.stop(t.Context()) })
	if h.addr.String() != addr {
		t.Errorf("listens on %s, want the inherited %s", h.addr, addr)
	}
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Errorf("GET /metrics: %s", resp.Status)
	}
}

func TestListenAddressRules(t *testing.T) {
	for addr, ok := range map[string]bool{
		"127.0.0.1:8080": true, ":0": true, "fd:3": true, "fd:17": true,
		"8080": false, "fd:": false, "fd:2": false, "fd:-1": false, "fd:x": false,
	} {
		if err := checkListenAddr(addr); (err == nil) != ok {
			t.Errorf("checkListenAddr(%q) = %v, want ok=%v", addr, err, ok)
		}
	}
}
