package chattemplate

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/duet-serve/duet/tokenizer/internal/reftest"
)

// The reference is @huggingface/jinja (the Jinja engine of
// transformers.js) driven by tests/reference/render.mjs, which prepares
// the messages as vLLM does. Render must give its text byte for byte for
// every conversation in testdata/, and fail where it fails.

// requireReference fails the test when node or the reference packages are
// missing (it skips under -short), and returns node's path.
func requireReference(t *testing.T) string { return reftest.Require(t, "@huggingface/jinja") }

type refResult struct {
	Text  *string `json:"text"`
	Error string  `json:"error"`
}

// renderReference renders cases with render.mjs in one node process.
func renderReference(t *testing.T, node, model string, cases []refCase) (string, []refResult) {
	t.Helper()
	config, err := filepath.Abs(filepath.Join(reftest.ModelDir(model), "tokenizer_config.json"))
	require.NoError(t, err)
	req, err := json.Marshal(map[string]any{
		"config": config,
		"cases":  cases,
	})
	require.NoError(t, err)
	cmd := exec.Command(node, "render.mjs")
	cmd.Dir = reftest.Dir()
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
			abs, err := filepath.Abs(reftest.ModelDir(model))
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
