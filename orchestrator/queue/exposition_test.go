package queue

import (
	"fmt"
	"strings"
	"testing"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
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

// vllmPage renders a vLLM V1 /metrics page as prometheus_client writes it
// (Python's float repr, `le` last, a _created gauge after each counter and
// histogram): the process and GC series, the scheduler gauges, the token
// counters, three request histograms and the cache config info; about 200
// lines, the engine's page in one data-parallel rank.
func vllmPage() string {
	var b strings.Builder
	family := func(name, typ, help string) {
		fmt.Fprintf(&b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, typ)
	}
	for _, c := range []string{"objects_collected", "objects_uncollectable", "collections"} {
		family("python_gc_"+c+"_total", "counter", "Python garbage collector "+c)
		for gen := range 3 {
			fmt.Fprintf(&b, "python_gc_%s_total{generation=\"%d\"} %d.0\n", c, gen, 1000*(gen+1))
		}
	}
	family("python_info", "gauge", "Python platform information")
	b.WriteString(`python_info{implementation="CPython",major="3",minor="12",patchlevel="11",version="3.12.11"} 1.0` + "\n")
	for _, p := range []struct{ name, typ, value string }{
		{"process_virtual_memory_bytes", "gauge", "2.1604061184e+010"}, {"process_resident_memory_bytes", "gauge", "1.776865280e+09"},
		{"process_start_time_seconds", "gauge", "1.76421e+09"}, {"process_cpu_seconds_total", "counter", "812.43"},
		{"process_open_fds", "gauge", "112.0"}, {"process_max_fds", "gauge", "1.048576e+06"},
	} {
		family(p.name, p.typ, "Process metric.")
		fmt.Fprintf(&b, "%s %s\n", p.name, p.value)
	}
	const labels = `engine="0",model_name="Qwen/Qwen3-8B"`
	for _, g := range []struct{ name, value string }{
		{"vllm:num_requests_running", "12.0"}, {"vllm:num_requests_waiting", "3.0"}, {"vllm:kv_cache_usage_perc", "0.4183"},
	} {
		family(g.name, "gauge", "Scheduler state.")
		fmt.Fprintf(&b, "%s{%s} %s\n", g.name, labels, g.value)
	}
	for _, c := range []string{"prefix_cache_queries", "prefix_cache_hits", "num_preemptions", "prompt_tokens", "generation_tokens"} {
		family("vllm:"+c+"_total", "counter", "Token and request counts.")
		fmt.Fprintf(&b, "vllm:%s_total{%s} 1.234567e+06\n", c, labels)
		family("vllm:"+c+"_created", "gauge", "Token and request counts.")
		fmt.Fprintf(&b, "vllm:%s_created{%s} 1.7642103815e+09\n", c, labels)
	}
	family("vllm:request_success_total", "counter", "Count of successfully processed requests.")
	for _, r := range []string{"stop", "length", "abort"} {
		fmt.Fprintf(&b, "vllm:request_success_total{%s,finished_reason=\"%s\"} 401.0\n", labels, r)
	}
	for _, h := range []struct {
		name    string
		buckets []string
	}{
		{"vllm:time_to_first_token_seconds", strings.Fields("0.001 0.005 0.01 0.02 0.04 0.06 0.08 0.1 0.25 0.5 0.75 1.0 2.5 5.0 7.5 10.0 20.0 40.0 80.0 160.0 640.0 2560.0")},
		{"vllm:e2e_request_latency_seconds", strings.Fields("0.3 0.5 0.8 1.0 1.5 2.0 2.5 5.0 10.0 15.0 20.0 30.0 40.0 50.0 60.0 120.0 240.0 480.0 960.0 1920.0 7680.0")},
		{"vllm:request_prompt_tokens", strings.Fields("1.0 2.0 5.0 10.0 20.0 50.0 100.0 200.0 500.0 1000.0 2000.0 5000.0 10000.0 20000.0 32768.0")},
		{"vllm:request_generation_tokens", strings.Fields("1.0 2.0 5.0 10.0 20.0 50.0 100.0 200.0 500.0 1000.0 2000.0 5000.0 10000.0 20000.0 32768.0")},
	} {
		family(h.name, "histogram", "A request histogram.")
		for i, le := range append(h.buckets, "+Inf") {
			fmt.Fprintf(&b, "%s_bucket{%s,le=\"%s\"} %d.0\n", h.name, labels, le, 10*i)
		}
		fmt.Fprintf(&b, "%s_count{%s} %d.0\n%s_sum{%s} 8123.25\n", h.name, labels, 10*len(h.buckets), h.name, labels)
		family(h.name+"_created", "gauge", "A request histogram.")
		fmt.Fprintf(&b, "%s_created{%s} 1.7642103815e+09\n", h.name, labels)
	}
	family("vllm:cache_config_info", "gauge", "Information of the LLMEngine CacheConfig")
	b.WriteString(`vllm:cache_config_info{block_size="16",cache_dtype="auto",calculate_kv_scales="False",cpu_offload_gb="0",` +
		`enable_prefix_caching="True",engine="0",gpu_memory_utilization="0.9",is_attention_free="False",num_cpu_blocks="None",` +
		`num_gpu_blocks="61440",num_gpu_blocks_override="None",prefix_caching_hash_algo="sha256",sliding_window="None",swap_space="4"} 1.0` + "\n")
	return b.String()
}

// BenchmarkGaugeValue and BenchmarkGaugeValueExpfmt parse one scrape of
// vllmPage with gaugeValue's line scanner and with prometheus/common's
// expfmt, which builds every family of the page: see exposition.go.
func BenchmarkGaugeValue(b *testing.B) {
	benchGauge(b, gaugeValue)
}

func BenchmarkGaugeValueExpfmt(b *testing.B) {
	benchGauge(b, func(text, name string) (float64, error) {
		parser := expfmt.NewTextParser(model.UTF8Validation)
		families, err := parser.TextToMetricFamilies(strings.NewReader(text))
		if err != nil {
			return 0, err
		}
		sum := 0.0
		for _, m := range families[name].GetMetric() {
			sum += m.GetGauge().GetValue()
		}
		return sum, nil
	})
}

func benchGauge(b *testing.B, parse func(text, name string) (float64, error)) {
	page := vllmPage()
	b.SetBytes(int64(len(page)))
	b.ReportAllocs()
	for b.Loop() {
		if v, err := parse(page, "vllm:num_requests_waiting"); err != nil || v != 3 {
			b.Fatal(v, err)
		}
	}
}
