package validate

import (
	"fmt"
	"maps"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/baton-run/baton"
	"github.com/baton-run/baton/clients"
	"github.com/baton-run/baton/cmd/demo-worker/contract"
)

// worker is a container that sets BATON_* variables: a Baton worker, with the environment it gets.
type worker struct {
	dep *appsv1.Deployment
	c   *corev1.Container
	// env holds every variable the container gets, envFrom's first, then env's (the later wins). A
	// variable from a field or a Secret has its value resolved where the manifest holds it (a pod
	// label), else fromRef set.
	env map[string]envVar
	// checked is the Baton configuration the environment gives, when it loads and checks.
	checked baton.CheckedConfig
	bad     []Violation // what resolving the environment found wrong (RuleEnv)
}

type envVar struct {
	value   string
	known   bool   // value holds what the container will see
	fromRef string // where an unknown value comes from, for messages
}

func (w *worker) id() string { return "Deployment/" + w.dep.Name + " container " + w.c.Name }

func (w *worker) envError(format string, args ...any) {
	w.bad = append(w.bad, Violation{RuleEnv, w.id(), fmt.Sprintf(format, args...)})
}

// workers finds the Baton workers of every Deployment.
func workers(o *Objects) []*worker {
	var out []*worker
	for _, d := range o.Deployments {
		for i := range d.Spec.Template.Spec.Containers {
			w := &worker{dep: d, c: &d.Spec.Template.Spec.Containers[i], env: map[string]envVar{}}
			w.resolveEnv(o)
			if w.setsBaton() {
				w.loadConfig()
				out = append(out, w)
			}
		}
	}
	return out
}

func (w *worker) setsBaton() bool {
	for name := range w.env {
		if strings.HasPrefix(name, baton.EnvPrefix) {
			return true
		}
	}
	return false
}

// resolveEnv reads envFrom (ConfigMaps of the render) and env into w.env.
func (w *worker) resolveEnv(o *Objects) {
	for _, from := range w.c.EnvFrom {
		switch {
		case from.ConfigMapRef != nil:
			cm := findConfigMap(o, w.dep.Namespace, from.ConfigMapRef.Name)
			if cm == nil {
				w.envError("envFrom names ConfigMap %s, which is not in the render: its variables cannot be checked", from.ConfigMapRef.Name)
				continue
			}
			for k, v := range cm.Data {
				w.env[from.Prefix+k] = envVar{value: v, known: true}
			}
		case from.SecretRef != nil:
			w.envError("envFrom names Secret %s: the names of its variables cannot be checked; mount Secrets as files (the BATON_*_FILE variables, -*-password-file)", from.SecretRef.Name)
		}
	}
	labels := w.dep.Spec.Template.Labels
	for _, e := range w.c.Env {
		switch f := e.ValueFrom; {
		case f == nil:
			w.env[e.Name] = envVar{value: e.Value, known: true}
		case f.FieldRef != nil && strings.HasPrefix(f.FieldRef.FieldPath, "metadata.labels['"):
			key := strings.TrimSuffix(strings.TrimPrefix(f.FieldRef.FieldPath, "metadata.labels['"), "']")
			v, ok := labels[key]
			w.env[e.Name] = envVar{value: v, known: ok, fromRef: f.FieldRef.FieldPath}
		case f.FieldRef != nil:
			w.env[e.Name] = envVar{fromRef: f.FieldRef.FieldPath}
		case f.ResourceFieldRef != nil:
			w.env[e.Name] = envVar{fromRef: "resource " + f.ResourceFieldRef.Resource}
		case f.SecretKeyRef != nil:
			w.env[e.Name] = envVar{fromRef: "Secret " + f.SecretKeyRef.Name}
		case f.ConfigMapKeyRef != nil:
			cm := findConfigMap(o, w.dep.Namespace, f.ConfigMapKeyRef.Name)
			v, ok := "", false
			if cm != nil {
				v, ok = cm.Data[f.ConfigMapKeyRef.Key]
			}
			w.env[e.Name] = envVar{value: v, known: ok, fromRef: "ConfigMap " + f.ConfigMapKeyRef.Name}
		}
	}
}

func findConfigMap(o *Objects, namespace, name string) *corev1.ConfigMap {
	for _, cm := range o.ConfigMaps {
		if cm.Name == name && cm.Namespace == namespace {
			return cm
		}
	}
	return nil
}

// loadConfig checks the BATON_* names and loads the configuration as the worker would
// (baton.LoadEnv, Config.Check), from the values the manifest holds; a value it cannot know (from a
// Secret or the pod's own fields) is left to the worker.
func (w *worker) loadConfig() {
	known := slices.Concat(clients.EnvVars(), contract.Env())
	for _, v := range baton.EnvVars() {
		known = append(known, v[0])
	}
	var environ []string
	for _, name := range slices.Sorted(maps.Keys(w.env)) {
		v := w.env[name]
		if strings.HasPrefix(name, baton.EnvPrefix) && !slices.Contains(known, name) {
			w.envError("%s is not a variable of the worker (baton.EnvVars, clients.EnvVars, cmd/demo-worker/contract.Env)", name)
		}
		if v.known {
			environ = append(environ, name+"="+v.value)
		}
	}
	cfg, err := baton.LoadEnvFrom(baton.Config{}, environ, slices.Concat(clients.EnvVars(), contract.Env())...)
	if err != nil {
		w.envError("the worker would refuse its environment: %v", err)
		return
	}
	if w.checked, err = cfg.Check(); err != nil {
		w.envError("the worker would refuse its configuration: %v", err)
	}
}

// setting returns a setting of the demo worker: its flag in the container's command or args (-name=v,
// --name=v, -name v), else its variable, when the manifest holds it.
func (w *worker) setting(flag, env string) (string, bool) {
	args := slices.Concat(w.c.Command, w.c.Args)
	for i, a := range args {
		name, value, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if !strings.HasPrefix(a, "-") || name != flag {
			continue
		}
		if hasValue {
			return value, true
		}
		if i+1 < len(args) {
			return args[i+1], true
		}
	}
	v, ok := w.env[env]
	return v.value, ok && v.known
}

// duration is a duration setting of the demo worker, or def when the manifest sets none.
func (w *worker) duration(flag, env string, def time.Duration) (time.Duration, error) {
	v, ok := w.setting(flag, env)
	if !ok {
		return def, nil
	}
	d, err := time.ParseDuration(strings.TrimSpace(v))
	if err != nil || d <= 0 {
		return 0, fmt.Errorf("-%s (%s) %q is not a positive duration", flag, env, v)
	}
	return d, nil
}

// httpPort is the port the worker listens on: -http or BATON_HTTP_ADDR, else contract.DefaultHTTPAddr.
func (w *worker) httpPort() (int32, error) {
	addr, ok := w.setting("http", contract.EnvHTTPAddr)
	if !ok {
		addr = contract.DefaultHTTPAddr
	}
	_, port, err := net.SplitHostPort(strings.TrimSpace(addr))
	if err != nil {
		return 0, fmt.Errorf("-http (%s) %q is not [HOST]:PORT: a Kubernetes port cannot name it", contract.EnvHTTPAddr, addr)
	}
	n, err := strconv.ParseInt(port, 10, 32)
	if err != nil {
		return 0, fmt.Errorf("-http (%s) %q: port %q is not a number", contract.EnvHTTPAddr, addr, port)
	}
	return int32(n), nil
}
