package main

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestSummaryCountsAndFails(t *testing.T) {
	in := `{"Action":"run","Package":"p","Test":"TestA"}
{"Action":"output","Package":"p","Test":"TestA","Output":"quiet\n"}
{"Action":"pass","Package":"p","Test":"TestA"}
{"Action":"output","Package":"p","Test":"TestB","Output":"    b_test.go:3: boom\n"}
{"Action":"fail","Package":"p","Test":"TestB"}
{"Action":"skip","Package":"p","Test":"TestC"}
{"Action":"output","Package":"p","Output":"FAIL\tp\t0.01s\n"}
{"Action":"fail","Package":"p"}
`
	var out strings.Builder
	require.Equal(t, 1, summarize(strings.NewReader(in), &out))
	require.Contains(t, out.String(), "b_test.go:3: boom")
	require.NotContains(t, out.String(), "quiet", "a passing test's output is not shown")
	require.Contains(t, out.String(), "FAIL\tp\t0.01s")
	require.True(t, strings.HasSuffix(out.String(), "1 passed, 1 failed, 1 skipped\n"), out.String())

	out.Reset()
	require.Equal(t, 0, summarize(strings.NewReader(`{"Action":"pass","Package":"p","Test":"TestA"}`+"\n"), &out))
	require.Contains(t, out.String(), "1 passed, 0 failed, 0 skipped")

	out.Reset()
	require.Equal(t, 1, summarize(strings.NewReader(`{"Action":"fail","Package":"q"}`+"\n"), &out), "a package that failed to build fails")

	out.Reset()
	noTests := `{"Action":"output","Package":"r","Output":"?   \tr\t[no test files]\n"}
{"Action":"skip","Package":"r"}
{"Action":"pass","Package":"p"}
`
	require.Equal(t, 0, summarize(strings.NewReader(noTests), &out))
	require.Contains(t, out.String(), "0 passed, 0 failed, 0 skipped", "a package without tests is no skipped test")
}
