package main

import (
	"errors"
	"fmt"
	"net"
	"strconv"
)

// The servers' well-known ports, which -fixed-ports asks for.
const (
	wellKnownEtcd       = 2379
	wellKnownTemporal   = 7233
	wellKnownTemporalUI = 8233 // the Temporal CLI's Web UI
	wellKnownRedis      = 6379
)

// wellKnownPorts sets, for -fixed-ports, the port flags not given to their servers' well-known
// ports. The Web UI's is set once the Temporal CLI is known to run: a port for it asks for the CLI.
func (o *options) wellKnownPorts() {
	for _, p := range []struct {
		flag string
		port *int
		wk   int
	}{
		{"etcd-port", &o.servers.EtcdPort, wellKnownEtcd},
		{"temporal-port", &o.temporal.port, wellKnownTemporal},
		{"redis-port", &o.servers.RedisPort, wellKnownRedis},
	} {
		if !o.given[p.flag] {
			*p.port = p.wk
		}
	}
	o.temporal.wellKnownUI = !o.given["temporal-ui-port"]
}

// portFlag is a port asked for by a flag (or by -fixed-ports for it); 0 picks a free one.
type portFlag struct {
	by   string // the flags that ask for it, as the user gave them
	flag string // the port's own flag
	port int
}

// ports returns the ports asked for, with t's Temporal ports: every etcd member's, Temporal's, its
// Web UI's and Redis's.
func (o options) ports(t temporalOptions) []portFlag {
	var ps []portFlag
	add := func(flag string, value, port int, more string) {
		by := fmt.Sprintf("-%s=%d%s", flag, value, more)
		if o.fixedPorts && !o.given[flag] {
			by = fmt.Sprintf("-fixed-ports (%s)", by)
		}
		ps = append(ps, portFlag{by, flag, port})
	}
	for i := range o.servers.EtcdMembers {
		if p := o.servers.EtcdPort; p != 0 {
			more := ""
			if i > 0 {
				more = fmt.Sprintf(" with -etcd-members=%d: member %d", o.servers.EtcdMembers, i)
			}
			add("etcd-port", p, p+i, more)
		}
	}
	for _, p := range []struct {
		flag string
		port int
	}{{"temporal-port", t.port}, {"temporal-ui-port", t.uiPort}, {"redis-port", o.servers.RedisPort}} {
		if p.port != 0 {
			add(p.flag, p.port, p.port, "")
		}
	}
	return ps
}

// checkPorts checks that the ports are TCP ports, each asked for once.
func checkPorts(ports []portFlag) error {
	seen := map[int]string{}
	for _, p := range ports {
		if p.port < 1 || p.port > 65535 {
			return fmt.Errorf("%s: port %d: want a TCP port, 1 to 65535 (or 0 for a free one)", p.by, p.port)
		}
		if other, ok := seen[p.port]; ok {
			return fmt.Errorf("%s: port %d is %s's already", p.by, p.port, other)
		}
		seen[p.port] = p.by
	}
	return nil
}

// checkPortsFree fails, naming the flag, when a port asked for is not free on 127.0.0.1: before
// anything starts, rather than as one server's failure after the others started. Every port that is
// not free is named, so that one run tells all that is in the way.
func checkPortsFree(ports []portFlag) error {
	if err := checkPorts(ports); err != nil {
		return err
	}
	var errs []error
	for _, p := range ports {
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p.port)))
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: port %d on 127.0.0.1 is not free (%v): stop what listens there, or give -%s another port",
				p.by, p.port, err, p.flag))
			continue
		}
		l.Close()
	}
	return errors.Join(errs...)
}
