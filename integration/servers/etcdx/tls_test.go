package etcdx

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/baton-run/baton/internal/testcerts"
)

// With ClientTLS the members serve https:// client URLs that demand a client certificate; NewClient
// dials with ClientTLSConfig; a client without a certificate is refused.
func TestClientTLS(t *testing.T) {
	if os.Getenv(EnvEndpoints) != "" {
		t.Skip("external cluster")
	}
	dir := t.TempDir()
	ca, err := testcerts.NewCA(dir, "etcd")
	if err != nil {
		t.Fatal(err)
	}
	server, err := ca.Server("server")
	if err != nil {
		t.Fatal(err)
	}
	cert, err := ca.Client("client", "tester")
	if err != nil {
		t.Fatal(err)
	}
	clientTLS, err := ca.ClientTLS(cert)
	if err != nil {
		t.Fatal(err)
	}
	c := Start(t, Options{
		ClientTLS:       &transport.TLSInfo{CertFile: server.CertFile, KeyFile: server.KeyFile, TrustedCAFile: ca.CertFile, ClientCertAuth: true},
		ClientTLSConfig: clientTLS,
	})
	if ep := c.Endpoints()[0]; !strings.HasPrefix(ep, "https://127.0.0.1:") {
		t.Fatalf("endpoint %s, want https://", ep)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if _, err := Client(t, c).Put(ctx, "k", "v"); err != nil {
		t.Fatalf("Put over TLS: %v", err)
	}

	noCert, err := ca.ClientTLS(testcerts.Pair{})
	if err != nil {
		t.Fatal(err)
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: c.Endpoints(), TLS: noCert, DialTimeout: time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	short, cancel2 := context.WithTimeout(t.Context(), time.Second)
	defer cancel2()
	if _, err := cli.Get(short, "k"); err == nil {
		t.Fatal("a client without a certificate read a key")
	}
}
