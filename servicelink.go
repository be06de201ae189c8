package baton

import (
	"regexp"
	"slices"
	"strings"
)

// Kubernetes gives every container, unless its pod sets enableServiceLinks: false, variables for every
// Service of its namespace, named after the Service: a Service "baton-worker" with a TCP port 80 adds
// BATON_WORKER_SERVICE_HOST, BATON_WORKER_SERVICE_PORT (and BATON_WORKER_SERVICE_PORT_<NAME> per named
// port), BATON_WORKER_PORT, BATON_WORKER_PORT_80_TCP and BATON_WORKER_PORT_80_TCP_PROTO, _PORT and
// _ADDR (Docker's link variables). Nobody sets them by hand, and a loader that refused them as
// misspelt settings would crash-loop every worker of a namespace that has a Service named baton-*.
//
// serviceLinkName is their shape: the Service's name upper-cased with '-' as '_', then one of the
// kubelet's suffixes (protocols TCP, UDP and SCTP; port names upper-cased the same way).
var serviceLinkName = regexp.MustCompile(`^[A-Z][A-Z0-9_]*_(SERVICE_HOST|SERVICE_PORT(_[A-Z0-9_]+)?|PORT(_[0-9]+_(TCP|UDP|SCTP)(_PROTO|_PORT|_ADDR)?)?)$`)

// IsServiceLinkEnv reports whether name has the shape of a variable the kubelet injects for a
// Kubernetes Service (<SERVICE>_SERVICE_HOST, <SERVICE>_SERVICE_PORT[_<PORT NAME>], <SERVICE>_PORT,
// <SERVICE>_PORT_<n>_<TCP|UDP|SCTP>[_PROTO|_PORT|_ADDR]). LoadEnv and clients.LoadEnv ignore
// the BATON_* names of this shape instead of refusing them as unknown; no setting of Baton's has it.
func IsServiceLinkEnv(name string) bool { return serviceLinkName.MatchString(name) }

// ServiceLinkEnv returns, sorted and without repeats, the BATON_* names in environ (KEY=VALUE
// entries, as os.Environ gives them) that LoadEnv and clients.LoadEnv ignore as Kubernetes
// service links (IsServiceLinkEnv), for the caller to log once: they say that a pod's manifest lacks
// enableServiceLinks: false. Values are not returned.
func ServiceLinkEnv(environ []string) []string {
	var out []string
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(name, EnvPrefix) && IsServiceLinkEnv(name) {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}
