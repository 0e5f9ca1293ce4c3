package main

import (
	"bytes"
	"fmt"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/duet-serve/duet/router"
	"go.yaml.in/yaml/v3"
)

// TensorRT-LLM's disaggregated server config (trtllm-serve disaggregated -c
// disagg_config.yaml), read as its parser reads it: extract_disagg_cfg and
// extract_ctx_gen_cfgs in tensorrt_llm/llmapi/disagg_utils.py and the router
// types of tensorrt_llm/serve/router.py (TensorRT-LLM main, 2025-2026; the
// format is the same since the 1.0 releases). duet serves such a file
// unchanged: `duet serve --config disagg_config.yaml` is recognised by its
// context_servers / generation_servers keys.

// trtllmServerKeys are the top-level keys TensorRT-LLM's parser takes as
// its own; every other top-level key is a worker setting that both sections
// inherit (and that must not differ from a section's own value).
var trtllmServerKeys = []string{"hostname", "port", "max_retries", "perf_metrics_max_requests", "return_perf_metrics",
	"perf_metrics_output_dir", "context_servers", "generation_servers", "conditional_disagg_config", "otlp_config",
	"disagg_cluster", "node_id", "schedule_style", "allow_request_chat_template", "gen_strip_message_history",
	"gen_tokids_ctxbytes", "num_workers", "disagg_coordinator_url", "server_keep_alive_timeout"}

// trtllmPolicies maps TensorRT-LLM's router types to duet's policies.
var trtllmPolicies = map[string]string{
	"round_robin":    router.PolicyRoundRobin,
	"load_balancing": router.PolicyLeastLoad,
	"kv_cache_aware": router.PolicyKVAware,
	"conversation":   router.PolicyConversation,
}

// isTRTLLMConfig reports whether a YAML document is TensorRT-LLM's
// disaggregated server config rather than duet's.
func isTRTLLMConfig(data []byte) bool {
	var top map[string]any
	if yaml.Unmarshal(data, &top) != nil {
		return false
	}
	_, ctx := top["context_servers"]
	_, gen := top["generation_servers"]
	_, cluster := top["disagg_cluster"]
	return ctx || gen || cluster
}

// trtllmSection is one of context_servers / generation_servers.
type trtllmSection struct {
	key    string
	urls   []string // http://host:port
	router string   // TensorRT-LLM router type, lower case
	opts   map[string]any
}

// translateTRTLLMConfig turns a disagg_config.yaml into duet's configuration
// (YAML) and notes on the settings duet reads differently or not at all.
// Errors name the key, as TensorRT-LLM's own parser would refuse it.
func translateTRTLLMConfig(data []byte) ([]byte, []string, error) {
	var top map[string]any
	if err := yaml.Unmarshal(data, &top); err != nil {
		return nil, nil, fmt.Errorf("TensorRT-LLM config: %w", err)
	}
	cluster, notes, err := trtllmCluster(top["disagg_cluster"])
	if err != nil {
		return nil, nil, err
	}
	sections, inherited, err := trtllmSections(top, cluster == nil)
	if err != nil {
		return nil, nil, err
	}
	if len(inherited) > 0 {
		notes = append(notes, fmt.Sprintf("worker settings (%s) configure the TensorRT-LLM workers, which duet does not launch here: ignored", strings.Join(inherited, ", ")))
	}
	out := map[string]any{"server": map[string]any{"host": orDefault(top["hostname"], "localhost"), "port": orDefault(top["port"], 8000)}}
	orch := map[string]any{"protocol": "trtllm", "max_retries": orDefault(top["max_retries"], 1)}
	if m, ok := top["model"].(string); ok && m != "" {
		orch["models"] = []string{m}
	}
	if cd, ok := top["conditional_disagg_config"].(map[string]any); ok {
		for k, v := range cd {
			if k != "max_local_prefill_length" {
				return nil, nil, fmt.Errorf("TensorRT-LLM config: conditional_disagg_config.%s: unknown key (valid: max_local_prefill_length)", k)
			}
			orch["max_local_prefill_tokens"] = v
		}
	}
	out["orchestrator"] = orch
	rcfg, rnotes, err := trtllmRouter(sections)
	if err != nil {
		return nil, nil, err
	}
	out["router"] = rcfg
	notes = append(notes, rnotes...)
	notes = append(notes, trtllmUnsupported(top)...)
	fleet := map[string]any{
		"context":    map[string]any{"engine": "trtllm", "urls": sections[0].urls, "count": 0},
		"generation": map[string]any{"engine": "trtllm", "urls": sections[1].urls, "count": 0},
	}
	for k, v := range cluster {
		fleet[k] = v
	}
	out["fleet"] = fleet
	var b bytes.Buffer
	enc := yaml.NewEncoder(&b)
	if err := enc.Encode(out); err != nil {
		return nil, nil, err
	}
	return b.Bytes(), notes, nil
}

func orDefault(v, def any) any {
	if v == nil {
		return def
	}
	return v
}

// trtllmClusterKeys are DisaggClusterConfig's fields.
var trtllmClusterKeys = []string{"cluster_uri", "cluster_name", "minimal_instances", "heartbeat_interval_sec", "inactive_timeout_sec"}

// trtllmCluster reads disagg_cluster (TensorRT-LLM's dynamic worker
// registration) into duet's fleet keys; nil when absent. duet reads the
// etcd store; TensorRT-LLM's other store, hosted by its own disaggregated
// server (an http:// cluster_uri), has no equivalent.
func trtllmCluster(v any) (map[string]any, []string, error) {
	if v == nil {
		return nil, nil, nil
	}
	c, ok := v.(map[string]any)
	if !ok {
		return nil, nil, fmt.Errorf("TensorRT-LLM config: disagg_cluster: must be a mapping")
	}
	for k := range c {
		if !slices.Contains(trtllmClusterKeys, k) {
			return nil, nil, fmt.Errorf("TensorRT-LLM config: disagg_cluster.%s: unknown key (valid: %s)", k, strings.Join(trtllmClusterKeys, ", "))
		}
	}
	uri, _ := c["cluster_uri"].(string)
	if !strings.HasPrefix(uri, "etcd://") {
		return nil, nil, fmt.Errorf("TensorRT-LLM config: disagg_cluster.cluster_uri: duet reads workers registered in etcd (etcd://host:port); got %q (an http:// store lives inside TensorRT-LLM's own disaggregated server)", uri)
	}
	out := map[string]any{"etcd_uri": uri}
	if name, ok := c["cluster_name"]; ok {
		out["etcd_cluster_name"] = name
	}
	var notes []string
	for _, k := range []string{"minimal_instances", "heartbeat_interval_sec", "inactive_timeout_sec"} {
		if _, ok := c[k]; ok {
			notes = append(notes, fmt.Sprintf("disagg_cluster.%s: no equivalent (duet serves once a ctx and a gen worker pass their health checks; a worker leaves when its etcd lease expires)", k))
		}
	}
	return out, notes, nil
}

// trtllmSections reads both sections with the top-level worker settings
// they inherit, and returns the names of those settings. needURLs is false
// with disagg_cluster, where TensorRT-LLM ignores the sections' urls.
func trtllmSections(top map[string]any, needURLs bool) ([2]trtllmSection, []string, error) {
	var inherited []string
	for k := range top {
		if !slices.Contains(trtllmServerKeys, k) {
			inherited = append(inherited, k)
		}
	}
	sort.Strings(inherited)
	var out [2]trtllmSection
	for i, key := range []string{"context_servers", "generation_servers"} {
		raw, ok := top[key].(map[string]any)
		switch {
		case !ok && top[key] != nil:
			return out, nil, fmt.Errorf("TensorRT-LLM config: %s: must be a mapping", key)
		case !ok && needURLs:
			return out, nil, fmt.Errorf("TensorRT-LLM config: %s: at least one server must be listed (urls)", key)
		case !ok:
			raw = map[string]any{}
		}
		for _, k := range inherited {
			if v, set := raw[k]; set && !reflect.DeepEqual(v, top[k]) {
				return out, nil, fmt.Errorf("TensorRT-LLM config: %s.%s: set both at the top level and in %s, with different values", key, k, key)
			}
		}
		s, err := trtllmSectionOf(key, raw, needURLs)
		if err != nil {
			return out, nil, err
		}
		out[i] = s
	}
	return out, inherited, nil
}

// trtllmSectionOf reads urls, num_instances and router of one section.
func trtllmSectionOf(key string, raw map[string]any, needURLs bool) (trtllmSection, error) {
	s := trtllmSection{key: key, router: "round_robin", opts: map[string]any{}}
	if err := s.readRouter(raw); err != nil || !needURLs {
		return s, err
	}
	n := 1
	if v, ok := raw["num_instances"]; ok {
		iv, ok := v.(int)
		if !ok || iv < 1 {
			return s, fmt.Errorf("TensorRT-LLM config: %s.num_instances: must be a positive integer, got %v", key, v)
		}
		n = iv
	}
	urls, _ := raw["urls"].([]any)
	if len(urls) == 0 {
		return s, fmt.Errorf("TensorRT-LLM config: %s.urls: required: duet does not launch TensorRT-LLM's MPI workers (num_instances without urls)", key)
	}
	if len(urls) != n {
		return s, fmt.Errorf("TensorRT-LLM config: %s: number of urls (%d) should be equal to num_instances (%d)", key, len(urls), n)
	}
	for i, u := range urls {
		str, _ := u.(string)
		host, port, ok := strings.Cut(str, ":")
		if _, err := strconv.Atoi(port); !ok || host == "" || err != nil || strings.Contains(port, ":") {
			return s, fmt.Errorf("TensorRT-LLM config: %s.urls[%d]: must be \"host:port\" (no scheme), got %q", key, i, str)
		}
		s.urls = append(s.urls, "http://"+str)
	}
	return s, nil
}

// readRouter reads the section's router type and options.
func (s *trtllmSection) readRouter(raw map[string]any) error {
	key := s.key
	if r, ok := raw["router"].(map[string]any); ok {
		for k, v := range r {
			if k == "type" {
				t, _ := v.(string)
				s.router = strings.ToLower(t)
				continue
			}
			s.opts[k] = v
		}
	}
	if _, ok := trtllmPolicies[s.router]; !ok {
		return fmt.Errorf("TensorRT-LLM config: %s.router.type: unsupported router type %q (valid: round_robin, load_balancing, kv_cache_aware, conversation)", key, s.router)
	}
	for _, k := range []string{"max_batch_size", "max_num_tokens"} { // router inputs in TensorRT-LLM
		if v, ok := raw[k]; ok {
			s.opts[k] = v
		}
	}
	return nil
}

// trtllmRouter maps the two sections' routers to duet's one policy (duet
// routes both legs of a request together) and their options to duet's
// router keys.
func trtllmRouter(sections [2]trtllmSection) (map[string]any, []string, error) {
	ctx, gen := sections[0], sections[1]
	policy := trtllmPolicies[ctx.router]
	var notes []string
	if ctx.router != gen.router {
		// The most conversation-aware of the two decides.
		for _, t := range []string{"conversation", "kv_cache_aware", "load_balancing"} {
			if ctx.router == t || gen.router == t {
				policy = trtllmPolicies[t]
				break
			}
		}
		notes = append(notes, fmt.Sprintf("context_servers.router.type %s and generation_servers.router.type %s differ: duet places both legs of a request with one policy, %s", ctx.router, gen.router, policy))
	}
	out := map[string]any{"policy": policy}
	var ignored []string
	for _, s := range sections {
		for k, v := range s.opts {
			switch k {
			case "tokens_per_block", "max_sessions":
				out[k] = v
			default:
				ignored = append(ignored, s.key+".router."+k)
			}
		}
	}
	sort.Strings(ignored)
	if len(ignored) > 0 {
		notes = append(notes, fmt.Sprintf("router settings without an equivalent in duet (its load is always token-weighted, its kv-aware and conversation policies need no batch size): %s", strings.Join(ignored, ", ")))
	}
	return out, notes, nil
}

// trtllmUnsupported notes the server settings duet does not read.
func trtllmUnsupported(top map[string]any) []string {
	var notes []string
	if s, ok := top["schedule_style"].(string); ok && s != "context_first" {
		notes = append(notes, fmt.Sprintf("schedule_style %s: duet sends the context phase first (context_first)", s))
	}
	for _, k := range []string{"perf_metrics_max_requests", "return_perf_metrics", "perf_metrics_output_dir", "otlp_config",
		"node_id", "allow_request_chat_template", "gen_strip_message_history", "gen_tokids_ctxbytes", "num_workers",
		"disagg_coordinator_url", "server_keep_alive_timeout"} {
		if _, ok := top[k]; ok {
			notes = append(notes, k+": no equivalent in duet, ignored")
		}
	}
	return notes
}
