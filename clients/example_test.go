package clients_test

import (
	"errors"
	"fmt"

	"github.com/baton-run/baton/clients"
)

// A configuration error names the field, the environment variable where one applies, and the rule;
// it never shows a secret.
func ExampleConfig_Validate() {
	cfg := clients.Config{EtcdEndpoints: []string{"https://etcd-0:2379"}, EtcdUsername: "baton"}
	err := cfg.Validate()
	fmt.Println(errors.Is(err, clients.ErrInvalidConfig))
	fmt.Println(err)

	cfg.EtcdPassword = "s3cret"
	fmt.Println(cfg.Validate())
	fmt.Println(cfg.RedisTarget()) // the default, as the clients dial it
	// Output:
	// true
	// clients: invalid config: EtcdPassword must be set with EtcdUsername: etcd's client sends no credentials without a password (BATON_ETCD_PASSWORD)
	// <nil>
	// localhost:6379
}
