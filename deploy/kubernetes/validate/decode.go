package validate

import (
	"fmt"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"sigs.k8s.io/yaml"
)

// Objects are the rendered objects, decoded, by kind.
type Objects struct {
	Namespaces      []*corev1.Namespace
	ServiceAccounts []*corev1.ServiceAccount
	ConfigMaps      []*corev1.ConfigMap
	Secrets         []*corev1.Secret
	Services        []*corev1.Service
	Deployments     []*appsv1.Deployment
	PDBs            []*policyv1.PodDisruptionBudget
	NetworkPolicies []*networkingv1.NetworkPolicy
	Roles           []*rbacv1.Role
	RoleBindings    []*rbacv1.RoleBinding
	ClusterRoles    []*rbacv1.ClusterRole
	ClusterBindings []*rbacv1.ClusterRoleBinding
	PodMonitors     []*monitoringv1.PodMonitor
}

// decoders maps apiVersion and kind to the typed list an object is decoded into.
func (o *Objects) decoders() map[[2]string]func([]byte) error {
	return map[[2]string]func([]byte) error{
		{"v1", "Namespace"}:                                                      into(&o.Namespaces),
		{"v1", "ServiceAccount"}:                                                 into(&o.ServiceAccounts),
		{"v1", "ConfigMap"}:                                                      into(&o.ConfigMaps),
		{"v1", "Secret"}:                                                         into(&o.Secrets),
		{"v1", "Service"}:                                                        into(&o.Services),
		{"apps/v1", "Deployment"}:                                                into(&o.Deployments),
		{"policy/v1", "PodDisruptionBudget"}:                                     into(&o.PDBs),
		{"networking.k8s.io/v1", "NetworkPolicy"}:                                into(&o.NetworkPolicies),
		{"rbac.authorization.k8s.io/v1", "Role"}:                                 into(&o.Roles),
		{"rbac.authorization.k8s.io/v1", "RoleBinding"}:                          into(&o.RoleBindings),
		{"rbac.authorization.k8s.io/v1", "ClusterRole"}:                          into(&o.ClusterRoles),
		{"rbac.authorization.k8s.io/v1", "ClusterRoleBinding"}:                   into(&o.ClusterBindings),
		{monitoringv1.SchemeGroupVersion.String(), monitoringv1.PodMonitorsKind}: into(&o.PodMonitors),
	}
}

// into returns a decoder that decodes strictly into a new T and appends it to list.
func into[T any](list *[]*T) func([]byte) error {
	return func(b []byte) error {
		v := new(T)
		// Strict: a field the type does not have (a typo, a field of another API version) or a key
		// given twice fails, where the API server would drop or reject it.
		if err := yaml.UnmarshalStrict(b, v); err != nil {
			return err
		}
		*list = append(*list, v)
		return nil
	}
}

// Decode decodes every manifest strictly into its Go type. Each manifest that fails, or whose kind
// the validator does not know, is a violation of RuleStrict.
func Decode(ms []Manifest) (*Objects, []Violation) {
	o := &Objects{}
	dec := o.decoders()
	var bad []Violation
	for _, m := range ms {
		d, ok := dec[[2]string{m.APIVersion, m.Kind}]
		if !ok {
			bad = append(bad, Violation{RuleStrict, m.ID(), fmt.Sprintf("%s %s is not a kind the validator knows: add its Go type to decode.go", m.APIVersion, m.Kind)})
			continue
		}
		if err := d(m.YAML); err != nil {
			bad = append(bad, Violation{RuleStrict, m.ID(), err.Error()})
		}
	}
	return o, bad
}
