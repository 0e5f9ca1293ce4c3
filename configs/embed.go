// Package configs holds duet's ready-made configuration files. The
// quickstart is embedded in the binary: it is what `duet serve` runs
// without --config.
package configs

import "embed"

// Quickstart is quickstart.yaml: 2 ctx + 2 gen simulated workers behind the
// frontend on 127.0.0.1:8000.
//
//go:embed quickstart.yaml
var Quickstart []byte

// Files holds every YAML file of this directory, for tests that load them.
//
//go:embed *.yaml
var Files embed.FS
