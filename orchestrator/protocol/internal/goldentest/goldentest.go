package goldentest

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/duet-serve/duet/orchestrator/protocol"
)

// Case is one golden scenario.
type Case struct {
	// Name names the subtest and the golden file testdata/golden/<Name>.json.
	Name string
	// Input is the adapter input; Body is read from Request when empty.
	Input protocol.Input
	// Request is a file under testdata/requests holding the client body.
	Request string
	// Response is a file under testdata/responses holding the ctx worker's
	// 2xx body; empty means none (the exchange then stops after the context
	// request unless the adapter is Concurrent).
	Response string
	// WantErr is the error the first failing step must wrap; nil means every
	// step must succeed.
	WantErr error
}

// Result is what one exchange produced. Steps after the first error are
// not run and stay nil.
type Result struct {
	// ContextRequest is what ContextRequest returned.
	ContextRequest *protocol.Request
	// Context is what ParseContextResponse returned; nil when not run.
	Context *protocol.Context
	// GenerationRequest is what GenerationRequest returned; nil when not
	// run (no ctx response for a sequential adapter, or Finished).
	GenerationRequest *protocol.Request
	// Err is the first error.
	Err error
}

// Run runs every case as a parallel subtest of t against a, checking
// WantErr, that the input buffers are neither modified nor aliased by the
// results, that a second run gives the same bytes, and the golden file.
// With update set it rewrites the golden files instead of comparing.
func Run(t *testing.T, a protocol.Adapter, cases []Case, update bool) {
	t.Helper()
	seen := map[string]bool{}
	for _, c := range cases {
		if seen[c.Name] {
			t.Fatalf("duplicate case name %q", c.Name)
		}
		seen[c.Name] = true
		t.Run(c.Name, func(t *testing.T) {
			t.Parallel()
			runCase(t, a, c, update)
		})
	}
}

func runCase(t *testing.T, a protocol.Adapter, c Case, update bool) {
	in := c.Input
	in.Body = bytes.Clone(in.Body) // this run scribbles over it
	if len(in.Body) == 0 && c.Request != "" {
		in.Body = ReadFile(t, "requests", c.Request)
	}
	var resp []byte
	if c.Response != "" {
		resp = ReadFile(t, "responses", c.Response)
	}
	bodyCopy, respCopy := bytes.Clone(in.Body), bytes.Clone(resp)

	res := Exchange(a, in, resp)
	again := Exchange(a, in, resp)

	if !bytes.Equal(in.Body, bodyCopy) || !bytes.Equal(resp, respCopy) {
		t.Fatalf("adapter modified its input buffers")
	}
	switch {
	case c.WantErr == nil && res.Err != nil:
		t.Fatalf("unexpected error: %v", res.Err)
	case c.WantErr != nil && !errors.Is(res.Err, c.WantErr):
		t.Fatalf("error = %v, want one wrapping %v", res.Err, c.WantErr)
	}
	// Scribble over the inputs: a result that aliased them would change.
	scribble(in.Body)
	scribble(resp)

	got := Canonical(t, document(t, res))
	if want := Canonical(t, document(t, again)); got != want {
		t.Fatalf("two runs differ:\n%s\n---\n%s", got, want)
	}
	path := filepath.Join("testdata", "golden", c.Name+".json")
	if update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test with -update to create it)", err)
	}
	if want := Canonical(t, raw); got != want {
		t.Errorf("%s differs from the golden file (run with -update to accept):\n%s", path, lineDiff(want, got))
	}
}

// Exchange runs one attempt through a: the context request, the parsing of
// resp when given, and the generation request unless the context finished
// the request. A sequential adapter without resp stops after the context
// request.
func Exchange(a protocol.Adapter, in protocol.Input, resp []byte) Result {
	var res Result
	ctxReq, err := a.ContextRequest(in)
	if err != nil {
		res.Err = err
		return res
	}
	res.ContextRequest = &ctxReq
	var ctx protocol.Context
	if resp != nil {
		if ctx, err = a.ParseContextResponse(in, resp); err != nil {
			res.Err = err
			return res
		}
		res.Context = &ctx
	} else if !a.Concurrent() {
		return res
	}
	if ctx.Finished {
		return res
	}
	genReq, err := a.GenerationRequest(in, ctx)
	if err != nil {
		res.Err = err
		return res
	}
	res.GenerationRequest = &genReq
	return res
}

// ReadFile returns testdata/<dir>/<name>.
func ReadFile(t *testing.T, dir, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", dir, name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// Canonical re-encodes a JSON document with sorted keys, two-space indent
// and numbers kept as written (never through float64), so two documents
// compare equal exactly when they hold the same values.
func Canonical(t *testing.T, doc []byte) string {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(doc))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, doc)
	}
	if dec.More() {
		t.Fatalf("trailing data after the JSON document:\n%s", doc)
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// document renders a Result as the golden JSON document.
func document(t *testing.T, res Result) []byte {
	t.Helper()
	doc := map[string]any{}
	if res.ContextRequest != nil {
		doc["context_request"] = request(*res.ContextRequest)
	}
	if res.Context != nil {
		c := res.Context
		doc["context"] = map[string]any{
			"handle":            raw(c.Handle),
			"prompt_token_ids":  raw(c.PromptTokenIDs),
			"usage":             raw(c.Usage),
			"prompt_tokens":     c.PromptTokens,
			"cached_tokens":     c.CachedTokens,
			"completion_tokens": c.CompletionTokens,
			"finish_reason":     c.FinishReason,
			"finished":          c.Finished,
			"text":              c.Text,
			"response_id":       c.ResponseID,
			"model":             c.Model,
			"created":           c.Created,
		}
	}
	if res.GenerationRequest != nil {
		doc["generation_request"] = request(*res.GenerationRequest)
	}
	if res.Err != nil {
		doc["error"] = res.Err.Error()
	}
	b, err := json.Marshal(doc)
	if err != nil {
		t.Fatalf("result is not JSON: %v", err)
	}
	return b
}

func request(r protocol.Request) map[string]any {
	headers := make([]map[string]string, len(r.Headers))
	for i, h := range r.Headers {
		headers[i] = map[string]string{"name": h.Name, "value": h.Value}
	}
	return map[string]any{"headers": headers, "body": json.RawMessage(r.Body)}
}

// raw keeps a raw value as JSON, nil as null.
func raw(b json.RawMessage) json.RawMessage {
	if b == nil {
		return json.RawMessage("null")
	}
	return b
}

func scribble(b []byte) {
	for i := range b {
		b[i] = 'x'
	}
}

// lineDiff shows the first differing line with some context.
func lineDiff(want, got string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	i := 0
	for i < len(w) && i < len(g) && w[i] == g[i] {
		i++
	}
	from := max(0, i-3)
	var b strings.Builder
	b.WriteString("first difference at line " + strconv.Itoa(i+1) + "\n--- want\n")
	b.WriteString(strings.Join(w[from:min(len(w), i+4)], "\n"))
	b.WriteString("\n+++ got\n")
	b.WriteString(strings.Join(g[from:min(len(g), i+4)], "\n"))
	return b.String()
}
