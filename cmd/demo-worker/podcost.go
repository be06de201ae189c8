package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"

	"go.uber.org/fx"
	"go.uber.org/zap"

	"github.com/baton-run/baton"
	"github.com/baton-run/baton/cmd/demo-worker/contract"
	"github.com/baton-run/baton/kubernetes/podcost"
)

// podOptions are the settings of the pod-deletion-cost annotation (package kubernetes/podcost): off
// by default; in a Kubernetes pod whose service account may get and patch its pod, on.
type podOptions struct {
	deletionCost      bool
	name              string
	serviceAccountDir string
}

// loadEnv reads the pod settings' variables.
func (p *podOptions) loadEnv() error {
	p.serviceAccountDir = podcost.DefaultServiceAccountDir
	if host, err := os.Hostname(); err == nil {
		// Kubernetes sets a pod's host name to the pod's name (unless its spec sets hostname).
		p.name = host
	}
	if v, ok := os.LookupEnv(contract.EnvPodDeletionCost); ok {
		b, err := strconv.ParseBool(strings.TrimSpace(v))
		if err != nil {
			return fmt.Errorf("%s: must be true or false, got %q", contract.EnvPodDeletionCost, v)
		}
		p.deletionCost = b
	}
	if v, ok := os.LookupEnv(contract.EnvPodName); ok {
		p.name = strings.TrimSpace(v)
	}
	if v, ok := os.LookupEnv(contract.EnvPodServiceAccountDir); ok {
		p.serviceAccountDir = strings.TrimSpace(v)
	}
	return nil
}

func (p *podOptions) addFlags(fs *flag.FlagSet) {
	fs.BoolVar(&p.deletionCost, "pod-deletion-cost", p.deletionCost, "in a Kubernetes pod: keep the pod's "+podcost.Annotation+
		" annotation equal to the number of queues this worker leads, so that a scale-in removes followers first; needs get and patch on its pod ("+contract.EnvPodDeletionCost+")")
	fs.StringVar(&p.name, "pod-name", p.name, "this worker's pod, for -pod-deletion-cost ("+contract.EnvPodName+"; default the host name)")
	fs.StringVar(&p.serviceAccountDir, "pod-service-account-dir", p.serviceAccountDir, "the pod's service-account token, ca.crt and namespace, for -pod-deletion-cost ("+contract.EnvPodServiceAccountDir+")")
}

func (p *podOptions) check() error {
	if p.deletionCost && p.name == "" {
		return fmt.Errorf("flag -pod-name (%s) must name this worker's pod with -pod-deletion-cost", contract.EnvPodName)
	}
	return nil
}

// startPodCost keeps the pod's deletion cost equal to the number of queues the Node leads, updated on
// every term's start and end. Its hook is registered after the Node's: it starts once the Node has
// started and stops before the Node resigns (a pod that is stopping is past its scale-in). A write
// that fails is the Updater's to log; it never touches leadership.
func startPodCost(lc fx.Lifecycle, node *baton.Node, o runOptions, log *zap.Logger) error {
	if !o.pod.deletionCost {
		return nil
	}
	queues := node.Config().Queues
	u, err := podcost.New(podcost.Config{Pod: o.pod.name, ServiceAccountDir: o.pod.serviceAccountDir, Logger: log.Named("podcost")},
		func() int {
			n := 0
			for _, q := range queues {
				if node.IsLeading(q) {
					n++
				}
			}
			return n
		})
	if err != nil {
		return fmt.Errorf("-pod-deletion-cost (%s): %w", contract.EnvPodDeletionCost, err)
	}
	err = node.Listen(baton.Listener{
		OnStartedLeading: func(context.Context, baton.Lead) { u.Changed() },
		OnStoppedLeading: func(string, error) { u.Changed() },
	})
	if err != nil {
		return err
	}
	lc.Append(fx.Hook{OnStart: u.Start, OnStop: u.Stop})
	return nil
}
