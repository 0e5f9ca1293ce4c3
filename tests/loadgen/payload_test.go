package loadgen

import (
	"encoding/json"
	"testing"

	"github.com/duet-serve/duet/tokenizer"
	"github.com/stretchr/testify/require"
)

func TestBody(t *testing.T) {
	msgs := []tokenizer.ChatMessage{{Role: "system", Content: "Be brief."}, {Role: "user", Content: "Hi"}}
	cfg := Defaults()
	cfg.Model, cfg.Streaming = "m", true
	extras, err := ParseExtraInputs(`{"ignore_eos": true, "min_tokens": 3}`)
	require.NoError(t, err)
	temp, err := ParseExtraInput("temperature:0.5")
	require.NoError(t, err)
	cfg.ExtraInputs = append(extras, temp)
	cases := []struct {
		name string
		edit func(*Config)
		want string
	}{
		{"chat streaming", func(*Config) {},
			`{"model":"m","messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"Hi"}],"stream":true,"stream_options":{"include_usage":true},"max_completion_tokens":8,"ignore_eos":true,"min_tokens":3,"temperature":0.5}`},
		{"legacy max_tokens, not streaming", func(c *Config) { c.LegacyMaxTokens, c.Streaming = true, false },
			`{"model":"m","messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"Hi"}],"stream":false,"max_tokens":8,"ignore_eos":true,"min_tokens":3,"temperature":0.5}`},
		{"completions", func(c *Config) { c.EndpointType = EndpointCompletions },
			`{"model":"m","prompt":"Be brief.\n\nHi","stream":true,"stream_options":{"include_usage":true},"max_tokens":8,"ignore_eos":true,"min_tokens":3,"temperature":0.5}`},
		{"an extra input replaces a field", func(c *Config) {
			c.ExtraInputs = []ExtraInput{{Key: "max_completion_tokens", Value: json.RawMessage(`99`)}}
		}, `{"model":"m","messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"Hi"}],"stream":true,"stream_options":{"include_usage":true},"max_completion_tokens":99}`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := cfg
			tc.edit(&c)
			require.JSONEq(t, tc.want, string(body(c, msgs, 8)))
			require.Equal(t, tc.want, string(body(c, msgs, 8)), "fields in a stable order")
		})
	}
}

func TestParseExtraInputAndHeaders(t *testing.T) {
	cases := []struct{ arg, key, value string }{
		{"ignore_eos:true", "ignore_eos", "true"},
		{"max_tokens:12", "max_tokens", "12"},
		{"stop:END", "stop", `"END"`},
		{"nvext:{\"top_k\":5}", "nvext", `{"top_k":5}`},
		{"url:http://x:1", "url", `"http://x:1"`},
	}
	for _, tc := range cases {
		e, err := ParseExtraInput(tc.arg)
		require.NoError(t, err, tc.arg)
		require.Equal(t, tc.key, e.Key)
		require.Equal(t, tc.value, string(e.Value))
	}
	_, err := ParseExtraInput("novalue")
	require.ErrorContains(t, err, "--extra-inputs")

	h, err := ParseHeaders("X-Tenant: blue")
	require.NoError(t, err)
	require.Equal(t, []Header{{"X-Tenant", "blue"}}, h)
	h, err = ParseHeaders(`{"B":"2","A":"1"}`)
	require.NoError(t, err)
	require.Equal(t, []Header{{"A", "1"}, {"B", "2"}}, h)
	_, err = ParseHeaders("nocolon")
	require.ErrorContains(t, err, "--header")
}

func TestConfigValidateNamesFlags(t *testing.T) {
	c := Defaults()
	require.ErrorContains(t, c.Validate(), "--model: required")
	c.Model = "m"
	require.NoError(t, c.Validate())
	cases := []struct {
		edit func(*Config)
		want string
	}{
		{func(c *Config) { c.EndpointType = "embeddings" }, "--endpoint-type: unknown type"},
		{func(c *Config) { c.RequestRate, c.UserCentricRate, c.NumUsers, c.TurnsMean = 1, 1, 2, 3 }, "mutually exclusive"},
		{func(c *Config) { c.UserCentricRate = 2 }, "--num-users: required"},
		{func(c *Config) { c.UserCentricRate, c.NumUsers = 2, 3 }, "--session-turns-mean >= 2"},
		{func(c *Config) { c.InputFile = "x.jsonl" }, "--custom-dataset-type: required"},
		{func(c *Config) { c.InputFile, c.DatasetType = "x", "sharegpt" }, "unknown type \"sharegpt\""},
		{func(c *Config) { c.RequestCount, c.NumSessions = 3, 3 }, "mutually exclusive"},
		{func(c *Config) { c.FixedSchedule = true }, "--fixed-schedule: needs an --input-file"},
		{func(c *Config) { c.ISL = 0 }, "--isl: must be >= 1"},
		{func(c *Config) { c.ArrivalPattern = "gamma" }, "--request-rate-mode: unknown pattern"},
	}
	for _, tc := range cases {
		cc := c
		tc.edit(&cc)
		require.ErrorContains(t, cc.Validate(), tc.want)
	}
}

func TestSyntheticSessionsAreReproducible(t *testing.T) {
	tok, corpus := testDeps(t)
	cfg := Defaults()
	cfg.TurnsMean, cfg.TurnsStddev, cfg.ISL, cfg.ISLStddev, cfg.OSL = 4, 1, 100, 20, 30
	cfg.TurnDelayMean, cfg.TurnDelayStddev, cfg.SharedSystemPromptLength, cfg.UserContextPromptLength = 200, 50, 64, 32
	a := newSynthetic(cfg, corpus, 9, 1, 20).all()
	b := newSynthetic(cfg, corpus, 9, 1, 20).all()
	require.Equal(t, a, b, "the same seed gives the same sessions")
	c := newSynthetic(cfg, corpus, 10, 1, 20).all()
	require.NotEqual(t, a[0].Turns[0].Text, c[0].Turns[0].Text)
	var isl []float64
	for _, s := range a {
		require.GreaterOrEqual(t, len(s.Turns), 1)
		require.Zero(t, s.Turns[0].Delay, "no think time before the first turn")
		require.InDelta(t, 64+2+32, tok.Count(s.System), 6, "shared prompt + blank line + user context")
		for _, turn := range s.Turns {
			isl = append(isl, float64(tok.Count(turn.Text)))
			require.GreaterOrEqual(t, turn.MaxTokens, 1)
		}
	}
	require.InDelta(t, 100, Summarize(isl).Avg, 15)
	require.Equal(t, a[0].System[:40], a[1].System[:40], "the system prompt starts with the shared part")
	require.NotEqual(t, a[0].System, a[1].System, "and ends with a per-session context")
}
