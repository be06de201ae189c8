package clients

import (
	"crypto/tls"
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/baton-run/baton/internal/testcerts"
)

// serveTLS accepts TLS connections that must present a client certificate signed by ca and answers
// the first bytes, as an etcd server answers the HTTP/2 preface.
func serveTLS(t *testing.T, ca *testcerts.CA) string {
	t.Helper()
	pair, err := ca.Server("server")
	if err != nil {
		t.Fatal(err)
	}
	cert, err := tls.LoadX509KeyPair(pair.CertFile, pair.KeyFile)
	if err != nil {
		t.Fatal(err)
	}
	l, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{cert}, ClientCAs: ca.Pool(),
		ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS12})
	if err != nil {
		t.Fatal(err)
	}
	serve(t, l, func(c net.Conn) {
		b := make([]byte, len(http2Preface))
		if _, err := io.ReadFull(c, b); err == nil {
			_, _ = c.Write([]byte("ok"))
		}
	})
	return l.Addr().String()
}

func serve(t *testing.T, l net.Listener, handle func(net.Conn)) {
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			wg.Go(func() { defer c.Close(); handle(c) })
		}
	})
	t.Cleanup(func() { l.Close(); wg.Wait() })
}

func TestProbeTLS(t *testing.T) {
	dir := t.TempDir()
	ca, err := testcerts.NewCA(dir, "a")
	if err != nil {
		t.Fatal(err)
	}
	other, err := testcerts.NewCA(dir, "b")
	if err != nil {
		t.Fatal(err)
	}
	addr := serveTLS(t, ca)
	clientPair, err := ca.Client("client", "c")
	if err != nil {
		t.Fatal(err)
	}
	withCert, _ := ca.ClientTLS(clientPair)
	noCert, _ := ca.ClientTLS(testcerts.Pair{})
	wrongCA, _ := other.ClientTLS(testcerts.Pair{})

	plain, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	serve(t, plain, func(c net.Conn) { _, _ = c.Write([]byte("-ERR not TLS\r\n")); time.Sleep(100 * time.Millisecond) })
	closed, _ := net.Listen("tcp", "127.0.0.1:0")
	down := closed.Addr().String()
	closed.Close()

	for _, tc := range []struct {
		name      string
		endpoints []string
		cfg       *tls.Config
		want      string // "" for no error
	}{
		{"accepted", []string{"https://" + addr}, withCert, ""},
		{"one of two accepts", []string{"https://" + down, addr}, withCert, ""},
		{"unreachable is no refusal", []string{"https://" + down}, noCert, ""},
		{"no client certificate", []string{"https://" + addr}, noCert, "certificate required"},
		{"server not trusted", []string{"https://" + addr}, wrongCA, "certificate signed by unknown authority"},
		{"not a TLS server", []string{"https://" + plain.Addr().String()}, withCert, "does not look like a TLS handshake"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := probeTLS(t.Context(), tc.endpoints, tc.cfg, 2*time.Second)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("probeTLS = %v, want nil", err)
			case tc.want != "" && (!errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), tc.want) ||
				!strings.Contains(err.Error(), "refused the TLS connection")):
				t.Fatalf("probeTLS = %v, want a refusal saying %q", err, tc.want)
			}
		})
	}
}
