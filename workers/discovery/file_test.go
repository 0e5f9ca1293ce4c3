package discovery

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/duet-serve/duet/proto/disagg"
	"github.com/stretchr/testify/require"
)

func TestParseFile(t *testing.T) {
	ws, err := ParseFile([]byte(`
workers:
  - {id: ctx-a, url: "http://10.0.0.1:8100/", role: context, bootstrap_port: 8998}
  - id: gen-a
    url: http://10.0.0.2:8200
    role: generation
`))
	require.NoError(t, err)
	require.Equal(t, []Worker{{ID: "ctx-a", URL: "http://10.0.0.1:8100", Role: disagg.RoleContext, BootstrapPort: 8998},
		{ID: "gen-a", URL: "http://10.0.0.2:8200", Role: disagg.RoleGeneration}}, ws)

	ws, err = ParseFile([]byte(`{"workers": [{"id": "m", "url": "https://h:1", "role": "mixed"}]}`))
	require.NoError(t, err, "JSON is YAML")
	require.Len(t, ws, 1)

	ws, err = ParseFile(nil)
	require.NoError(t, err)
	require.Empty(t, ws, "an empty file lists no worker")
}

func TestParseFileErrorsNameTheEntry(t *testing.T) {
	for doc, want := range map[string]string{
		`workers: [{id: a, url: "http://h:1", role: decode}]`:                                                 "workers[0].role: must be context, generation or mixed",
		`workers: [{id: a, url: "ftp://h:1", role: context}]`:                                                 "workers[0].url",
		`workers: [{id: "", url: "http://h:1", role: context}]`:                                               "workers[0].id",
		`workers: [{id: a, url: "http://h:1", role: context, port: 3}]`:                                       "field port not found",
		`workers: [{id: a, url: "http://h:1", role: context}, {id: a, url: "http://h:2", role: generation}]`:  `workers[1].id: "a" is also workers[0]'s`,
		`workers: [{id: a, url: "http://h:1", role: context}, {id: b, url: "http://h:1/", role: generation}]`: "workers[1].url",
		`workers: [{id: a, url: "http://h:1", role: generation, bootstrap_port: 9}]`:                          "workers[0].bootstrap_port",
		`wrkers: []`: "field wrkers not found",
	} {
		_, err := ParseFile([]byte(doc))
		require.ErrorContains(t, err, want, doc)
	}
}

func TestWatchFileAppliesChangesOnly(t *testing.T) {
	path := filepath.Join(t.TempDir(), "workers.yaml")
	write := func(s string) { // as a careful writer does: a whole new file, renamed over the old
		tmp := path + ".tmp"
		require.NoError(t, os.WriteFile(tmp, []byte(s), 0o644))
		require.NoError(t, os.Rename(tmp, path))
	}
	write(`workers: [{id: a, url: "http://h:1", role: context}]`)
	type update struct {
		ws  []Worker
		err error
	}
	got := make(chan update, 16)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		WatchFile(ctx, path, 5*time.Millisecond, func(ws []Worker, err error) { got <- update{ws, err} })
	}()
	defer func() { cancel(); <-done }()
	next := func() update {
		select {
		case u := <-got:
			return u
		case <-time.After(10 * time.Second):
			t.Fatal("no update")
		}
		return update{}
	}
	require.Equal(t, "a", next().ws[0].ID)
	write(`workers: [{id: b, url: "http://h:2", role: generation}]`)
	require.Equal(t, "b", next().ws[0].ID)
	write(`workers: [{id: b, url: "http://h:2", role: nonsense}]`)
	require.ErrorContains(t, next().err, "role")
	require.NoError(t, os.Remove(path))
	require.ErrorContains(t, next().err, "no such file")
	write(`workers: []`)
	u := next()
	require.NoError(t, u.err)
	require.Empty(t, u.ws)
	select {
	case u := <-got:
		t.Fatalf("an unchanged file was applied again: %+v", u)
	case <-time.After(50 * time.Millisecond):
	}
}

func TestSettledReportsAStateSeenTwiceInARow(t *testing.T) {
	reads := []string{"A", "A", "", "B-half", "B", "B", "B", "gone", "gone"}
	i := 0
	read := settled(func() (string, func()) {
		state := reads[i]
		i++
		return state, func() {}
	})
	var reported []string
	for range reads {
		if state, deliver := read(); deliver != nil {
			reported = append(reported, state)
		}
	}
	require.Equal(t, []string{"A", "B", "B", "gone"}, reported,
		"a file seen once (truncated, half written) is never reported; poll drops the repeats")
}
