package contract_test

import (
	"fmt"
	"testing"

	"github.com/baton-run/baton"
	"github.com/baton-run/baton/cmd/demo-worker/contract"
)

// No variable of the demo worker has the shape of a Kubernetes service link, which baton.LoadEnv
// ignores: a typo of it would be ignored, not refused.
func TestNoVariableHasTheServiceLinkShape(t *testing.T) {
	for _, name := range contract.Env() {
		if baton.IsServiceLinkEnv(name) {
			t.Errorf("%s has the shape of a Kubernetes service link", name)
		}
	}
}

func TestDefaultHTTPAddrIsOnTheDefaultPort(t *testing.T) {
	if want := fmt.Sprintf(":%d", contract.DefaultHTTPPort); contract.DefaultHTTPAddr != want {
		t.Fatalf("DefaultHTTPAddr %s, DefaultHTTPPort %d", contract.DefaultHTTPAddr, contract.DefaultHTTPPort)
	}
}

// With Baton's defaults the stop takes 19s by default, and may be given no less than 14s.
func ExampleDefaultShutdownTimeout() {
	checked, err := baton.Config{Project: "billing", Queues: []string{"orders"}}.Check()
	if err != nil {
		panic(err)
	}
	fmt.Println(contract.DefaultShutdownTimeout(checked), contract.MinShutdownTimeout(checked))
	// Output: 19s 14s
}
