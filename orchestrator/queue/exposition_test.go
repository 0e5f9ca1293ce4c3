package queue

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestGaugeValue(t *testing.T) {
	const name = "vllm:num_requests_waiting"
	cases := []struct {
		name, text string
		want       float64
		err        string
	}{
		{name: "plain", text: name + " 3\n", want: 3},
		{name: "labels and timestamp", text: name + `{model_name="m"} 2 1700000000000` + "\n", want: 2},
		{name: "summed over label sets", text: name + `{model_name="a"} 2` + "\n" + name + `{model_name="b"} 5`, want: 7},
		{name: "quoted braces and escapes", text: name + `{x="a}\"b} 9", y="z"} 4`, want: 4},
		{name: "comments and other metrics", text: "# HELP " + name + " x\n# TYPE " + name + " gauge\n" +
			name + "_total 100\nvllm:num_requests_running 5\n" + name + " 1.5e0\n", want: 1.5},
		{name: "NaN ignored", text: name + "{a=\"1\"} NaN\n" + name + "{a=\"2\"} 1\n", want: 1},
		{name: "windows line ends", text: name + " 2\r\n", want: 2},
		{name: "absent", text: "vllm:num_requests_running 5\n", err: "metric vllm:num_requests_waiting: not exposed"},
		{name: "only NaN", text: name + " NaN\n", err: "metric vllm:num_requests_waiting: not exposed"},
		{name: "no value", text: name + "{a=\"1\"}\n", err: "no value"},
		{name: "bad value", text: name + " many\n", err: "invalid syntax"},
		{name: "unterminated labels", text: name + "{a=\"1} 2\n", err: "malformed labels"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := gaugeValue(c.text, name)
			if c.err != "" {
				require.ErrorContains(t, err, c.err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, c.want, got)
		})
	}
}
