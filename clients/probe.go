package clients

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"time"
)

// http2Preface is what a gRPC client sends first; an etcd server answers it with a SETTINGS frame at
// once, so a healthy connection is confirmed without waiting for a timeout.
const http2Preface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

// probeTLS opens one TLS connection to each endpoint in parallel, within ctx and timeout, and returns
// nil as soon as one server accepts it. It returns an error (wrapping ErrRefused) only when no server accepted and at
// least one refused the TLS connection: a certificate it rejects or that we cannot verify. Servers
// that cannot be reached are no error here; the client's own dialing deals with them.
func probeTLS(ctx context.Context, endpoints []string, cfg *tls.Config, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	results := make(chan error, len(endpoints))
	for _, ep := range endpoints {
		go func() { results <- probeEndpoint(ctx, ep, cfg) }()
	}
	var refusals []error
	for range endpoints {
		err := <-results
		switch {
		case err == nil:
			return nil
		case errors.Is(err, ErrRefused):
			refusals = append(refusals, err)
		}
	}
	return errors.Join(refusals...)
}

func probeEndpoint(ctx context.Context, endpoint string, cfg *tls.Config) error {
	host := endpoint
	if u, err := url.Parse(endpoint); err == nil && u.Host != "" {
		host = u.Host
	}
	if strings.HasPrefix(endpoint, "unix") {
		return errors.New("unix socket: not probed")
	}
	cfg = cfg.Clone()
	cfg.NextProtos = []string{"h2"}
	if cfg.ServerName == "" {
		cfg.ServerName, _, _ = net.SplitHostPort(host)
	}
	d := tls.Dialer{Config: cfg}
	conn, err := d.DialContext(ctx, "tcp", host)
	if err != nil {
		if tlsRefusal(err) {
			return fmt.Errorf("%s %w the TLS connection: %w", endpoint, ErrRefused, err)
		}
		return err
	}
	defer conn.Close()
	if deadline, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(deadline)
	}
	// With TLS 1.3 a server that rejects the client's certificate says so only after the handshake:
	// the refusal is the answer to the first read.
	if _, err := conn.Write([]byte(http2Preface)); err != nil {
		return classify(endpoint, err)
	}
	var b [1]byte
	if _, err := conn.Read(b[:]); err != nil {
		return classify(endpoint, err)
	}
	return nil
}

func classify(endpoint string, err error) error {
	if tlsRefusal(err) {
		return fmt.Errorf("%s %w the TLS connection: %w", endpoint, ErrRefused, err)
	}
	return err
}

// tlsRefusal reports whether err is a TLS failure that retrying cannot fix: the peer sent an alert
// (it rejected our certificate, or the lack of one), our side could not verify the peer's
// certificate, or the peer does not speak TLS at all.
func tlsRefusal(err error) bool {
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "remote error" {
		return true
	}
	var (
		verify   *tls.CertificateVerificationError
		header   tls.RecordHeaderError
		unknown  x509.UnknownAuthorityError
		hostname x509.HostnameError
		invalid  x509.CertificateInvalidError
	)
	return errors.As(err, &verify) || errors.As(err, &header) || errors.As(err, &unknown) ||
		errors.As(err, &hostname) || errors.As(err, &invalid) || strings.Contains(err.Error(), "remote error: tls:")
}
