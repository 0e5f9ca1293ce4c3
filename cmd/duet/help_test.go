package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestHelpGroupsFlagsBySection(t *testing.T) {
	root := newRootCmd()
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetArgs([]string{"serve", "--help"})
	require.NoError(t, root.Execute())
	help := out.String()
	order := []string{"-h, --help", "Server flags (the config file's server: section):", "--port int",
		"Router flags", "--policy string", "Tokenizer flags", "--tokenizer-source", "Cluster flags", "--cluster-redis-address",
		"Global Flags:", "--config string"}
	at := -1
	for _, s := range order {
		i := strings.Index(help, s)
		require.Greater(t, i, at, "%q out of order in:\n%s", s, help)
		at = i
	}
}
