// Command render prints the objects of a kustomization, as `kubectl
// kustomize DIR` does, for deploy/'s tests on a machine without kubectl.
package main

import (
	"fmt"
	"os"

	"github.com/owedhq/owed/deploy/check"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: render KUSTOMIZATION-DIR")
		os.Exit(2)
	}
	m, err := check.Render(os.Args[1])
	if err == nil {
		var out []byte
		if out, err = m.AsYaml(); err == nil {
			_, err = os.Stdout.Write(out)
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "render:", err)
		os.Exit(1)
	}
}
