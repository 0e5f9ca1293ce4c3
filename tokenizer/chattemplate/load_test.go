package chattemplate

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

const chatml = `{% for m in messages %}<|im_start|>{{ m.role }}
{{ m.content }}<|im_end|>
{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant
{% endif %}`

func writeFile(t *testing.T, dir, name, text string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	require.NoError(t, os.WriteFile(p, []byte(text), 0o644))
	return p
}

func userConv(text string) Conversation {
	return Conversation{Messages: []Message{{Role: "user", Content: Text(text)}}, AddGenerationPrompt: true}
}

func TestLoadUnsupportedConstruct(t *testing.T) {
	for _, tc := range []struct {
		name, src, kind, construct string
	}{
		{"statement", `{% include "x.jinja" %}`, "statement", "include"},
		{"with", `{% with a = 1 %}{{ a }}{% endwith %}`, "statement", "with"},
		{"filter", `{{ messages | pprint }}`, "filter", "pprint"},
		{"filter block", `{% filter center %}x{% endfilter %}`, "filter", "center"},
		{"test", `{% if messages is divisibleby(3) %}x{% endif %}`, "test", "divisibleby"},
		{"method", `{{ messages[0].content.splitlines() }}`, "method", "splitlines"},
		{"function", `{{ zip(messages, messages) }}`, "function", "zip"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse(tc.src, nil, Options{})
			var ue *UnsupportedError
			require.ErrorAs(t, err, &ue)
			require.Equal(t, tc.kind, ue.Kind)
			require.Equal(t, tc.construct, ue.Name)
			require.Contains(t, err.Error(), tc.construct)
		})
	}
}

func TestLoadProbeFailsOnRenderError(t *testing.T) {
	// {{ x.y.z }} on a string is a render error, not a template verdict.
	_, err := Parse(`{{ messages[0].content.nope.deeper(1) }}`, nil, Options{})
	require.Error(t, err)
}

func TestLoadNamedTemplates(t *testing.T) {
	dir := t.TempDir()
	cfg := map[string]any{
		"bos_token": map[string]any{"__type": "AddedToken", "content": "<s>"},
		"eos_token": "</s>",
		"chat_template": []map[string]string{
			{"name": "default", "template": "{{ bos_token }}" + chatml},
			{"name": "tool_use", "template": "TOOLS{{ tools | length }}" + chatml},
		},
	}
	b, err := json.Marshal(cfg)
	require.NoError(t, err)
	path := writeFile(t, dir, "tokenizer_config.json", string(b))

	for _, p := range []string{dir, path} {
		tmpl, err := Load(p, "")
		require.NoError(t, err)
		out, err := tmpl.Render(userConv("hi"))
		require.NoError(t, err)
		require.Equal(t, "<s><|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n", out)
	}

	tmpl, err := Load(dir, "tool_use")
	require.NoError(t, err)
	conv := userConv("hi")
	conv.Tools = []json.RawMessage{probeTool}
	out, err := tmpl.Render(conv)
	require.NoError(t, err)
	require.Equal(t, "TOOLS1<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n", out)

	_, err = Load(dir, "rag")
	require.ErrorContains(t, err, `no chat template named "rag"; available: default, tool_use`)
}

func TestLoadJinjaFileBeforeConfig(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "tokenizer_config.json", `{"chat_template": "CONFIG", "eos_token": "<eos>"}`)
	jinjaPath := writeFile(t, dir, "chat_template.jinja", "{{ eos_token }}"+chatml)
	for _, p := range []string{dir, jinjaPath} {
		tmpl, err := Load(p, "")
		require.NoError(t, err)
		out, err := tmpl.Render(userConv("x"))
		require.NoError(t, err)
		require.Equal(t, "<eos><|im_start|>user\nx<|im_end|>\n<|im_start|>assistant\n", out)
	}
}

func TestRenderRequestErrors(t *testing.T) {
	tmpl, err := Parse(chatml, nil, Options{})
	require.NoError(t, err)

	conv := userConv("x")
	conv.ContinueFinalMessage = true
	_, err = tmpl.Render(conv)
	require.ErrorIs(t, err, ErrInvalidRequest)

	conv = userConv("x")
	conv.Kwargs = map[string]json.RawMessage{"chat_template": json.RawMessage(`"x"`)}
	_, err = tmpl.Render(conv)
	require.ErrorIs(t, err, ErrInvalidRequest)

	conv = userConv("")
	url := "http://x/y.png"
	conv.Messages[0].Content = Parts(Part{Type: "image_url", Text: &url})
	_, err = tmpl.Render(conv)
	require.ErrorIs(t, err, ErrUnsupportedPart)

	// A template's own raise_exception is a *TemplateError.
	strict, err := Parse(`{% if messages[0].role != 'user' %}{{ raise_exception('user first') }}{% endif %}ok`, nil, Options{})
	require.NoError(t, err)
	_, err = strict.Render(Conversation{Messages: []Message{{Role: "assistant", Content: Text("x")}}})
	var te *TemplateError
	require.True(t, errors.As(err, &te), "%v", err)
	require.Equal(t, "user first", te.Message)
}

func TestContentFormatDetection(t *testing.T) {
	for _, tc := range []struct {
		name, src string
		want      ContentFormat
	}{
		{"string", `{% for m in messages %}{{ m.content }}{% endfor %}`, FormatString},
		{"openai", `{% for m in messages %}{% for p in m.content %}{{ p.text }}{% endfor %}{% endfor %}`, FormatOpenAI},
		{"openai via set", `{% set loop_messages = messages[1:] %}{% for m in loop_messages %}{% for p in m['content'] | selectattr('type', 'equalto', 'text') %}{{ p.text }}{% endfor %}{% endfor %}`, FormatOpenAI},
		{"loop over other", `{% for m in messages %}{% for p in m.tool_calls %}{{ p }}{% endfor %}{% endfor %}`, FormatString},
		{"namespace target", `{% set ns.m = messages %}{% for m in messages %}{% for p in m.content %}{% endfor %}{% endfor %}`, FormatString},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tags, err := scanTags(tc.src)
			require.NoError(t, err)
			require.Equal(t, tc.want, detectContentFormat(tags))
		})
	}
}

// TestTojsonIsPythons pins the gaps between ardanlabs/jinja's tojson and
// Python's json.dumps that duet's own filter closes.
func TestTojsonIsPythons(t *testing.T) {
	tmpl, err := Parse(`{% if x is defined %}{{ x | tojson }}|{{ x | tojson(indent=2) }}|{{ x | tojson(separators=[',', ':'], sort_keys=true) }}{% endif %}`, nil, Options{})
	require.NoError(t, err)
	x := `{"b": [1.0, 1e6, 1e16, 1.5e-07, 0.1, -0.0, 12], "a": "\u2028<&>é\u0001", "c": {}, "d": []}`
	out, err := tmpl.Render(Conversation{Kwargs: map[string]json.RawMessage{"x": json.RawMessage(x)}})
	require.NoError(t, err)
	require.Equal(t, `{"b": [1.0, 1000000.0, 1e+16, 1.5e-07, 0.1, -0.0, 12], "a": "`+"\u2028"+`<&>é\u0001", "c": {}, "d": []}|{
  "b": [
    1.0,
    1000000.0,
    1e+16,
    1.5e-07,
    0.1,
    -0.0,
    12
  ],
  "a": "`+"\u2028"+`<&>é\u0001",
  "c": {},
  "d": []
}|{"a":"`+"\u2028"+`<&>é\u0001","b":[1.0,1000000.0,1e+16,1.5e-07,0.1,-0.0,12],"c":{},"d":[]}`, out)
}

func TestPyFloat(t *testing.T) {
	for f, want := range map[float64]string{
		1: "1.0", 0.5: "0.5", 1e16: "1e+16", 9999999999999998: "9999999999999998.0",
		1e-4: "0.0001", 1e-5: "1e-05", 123456789.125: "123456789.125", -2.5e-300: "-2.5e-300",
	} {
		require.Equal(t, want, pyFloat(f), "%v", f)
	}
}

func TestStrftimeNow(t *testing.T) {
	tmpl, err := Parse(`{{ strftime_now("%d %b %Y %H:%M %A %%") }}`, nil, Options{Now: func() time.Time {
		return time.Date(2024, 7, 26, 9, 5, 0, 0, time.UTC)
	}})
	require.NoError(t, err)
	out, err := tmpl.Render(Conversation{})
	require.NoError(t, err)
	require.Equal(t, "26 Jul 2024 09:05 Friday %", out)
}

// TestDecodeKeepsKeyOrder pins that JSON objects reach the template in
// their order, where jinja.FromGoValue would sort them.
func TestDecodeKeepsKeyOrder(t *testing.T) {
	v, err := decodeJSON([]byte(`{"z": 1, "a": {"y": 2.5, "b": null}}`))
	require.NoError(t, err)
	require.Equal(t, []string{"z", "a"}, v.AsDict().Keys)
	inner, _ := v.AsDict().Get("a")
	require.Equal(t, []string{"y", "b"}, inner.AsDict().Keys)
	y, _ := inner.AsDict().Get("y")
	require.True(t, y.IsFloat())
	z, _ := v.AsDict().Get("z")
	require.True(t, z.IsInt())
}
