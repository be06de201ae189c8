// Command validate checks Kustomize overlays of a Baton worker fleet without a cluster (package
// validate: a strict decoding into the Kubernetes API's types, then Baton's rules). It prints each
// violation on one line and exits 1 when there is any, 2 when an overlay does not build.
//
//	go run ./cmd/validate ../overlays/dev ../overlays/production path/to/your/overlay
package main

import (
	"fmt"
	"io"
	"os"

	"github.com/baton-run/baton/deploy/kubernetes/validate"
)

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

func run(dirs []string, stdout, stderr io.Writer) int {
	if len(dirs) == 0 {
		fmt.Fprintln(stderr, "usage: validate KUSTOMIZATION_DIR...")
		return 2
	}
	code := 0
	for _, dir := range dirs {
		bad, err := validate.Dir(dir)
		if err != nil {
			fmt.Fprintf(stderr, "validate: %v\n", err)
			code = 2
			continue
		}
		for _, v := range bad {
			fmt.Fprintf(stdout, "%s: %v\n", dir, v)
		}
		if len(bad) > 0 && code == 0 {
			code = 1
		} else if len(bad) == 0 {
			fmt.Fprintf(stdout, "%s: ok\n", dir)
		}
	}
	return code
}
