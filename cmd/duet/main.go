// Command duet is the one binary of duet, the disaggregated prefill/decode
// serving orchestrator: it serves, launches worker fleets, runs simulated
// workers and benchmarks. This package only wires the others together.
package main

import (
	"fmt"
	"os"
)

func main() {
	if err := newRootCmd().Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "duet:", err)
		os.Exit(1)
	}
}
