package workers

import (
	"net"
	"strconv"
	"time"
)

// Engine names accepted by PoolConfig.Engine.
const (
	EngineSim     = "sim"     // duet's simulated worker: `<duet> sim ...`
	EngineTRTLLM  = "trtllm"  // TensorRT-LLM: `trtllm-serve ...`
	EngineVLLM    = "vllm"    // vLLM with the NIXL connector: `vllm serve ...`
	EngineSGLang  = "sglang"  // SGLang: `python -m sglang.launch_server ...`
	EngineCommand = "command" // a user command template with placeholders
)

// CountAuto is PoolConfig.Count's default: DefaultCount workers, or none
// when the pool lists URLs.
const CountAuto = -1

// DefaultCount is the number of workers a pool launches when Count is
// CountAuto and no URLs are listed.
const DefaultCount = 2

// Engines lists the valid engine names, for error messages.
var Engines = []string{EngineSim, EngineTRTLLM, EngineVLLM, EngineSGLang, EngineCommand}

// Config is the `fleet:` section: the context and generation worker pools
// duet launches (or, with urls, only health-checks) and how it supervises
// them. Build it with Defaults, overlay the user's file, then Validate.
type Config struct {
	// RunDir holds the generated engine config files and one log file per
	// worker (<run_dir>/<name>.log). Default "": a fresh directory under
	// os.TempDir(), created at launch and left in place afterwards.
	RunDir string `mapstructure:"run_dir" yaml:"run_dir" help:"directory for generated engine configs and worker logs (empty: a fresh directory under the system temp dir)"`
	// Host is the address workers bind to and the host of their URLs
	// (default 127.0.0.1). An unspecified address (0.0.0.0, ::) binds all
	// interfaces and is advertised as 127.0.0.1.
	Host string `mapstructure:"host" yaml:"host" help:"address the launched workers listen on"`
	// GPUs is the list of GPU ids (indexes or UUIDs) handed out to workers
	// without overlap, context workers first. Default empty: the parent's
	// CUDA_VISIBLE_DEVICES when set, else 0..N-1 for the N GPUs the pools need.
	GPUs []string `mapstructure:"gpus" yaml:"gpus" help:"GPU ids to hand out (empty: CUDA_VISIBLE_DEVICES, else 0..N-1)"`
	// AllowGPUSharing lets the pools need more GPUs than listed: GPUs are then
	// handed out round-robin and shared. Default false: over-subscription is
	// a configuration error.
	AllowGPUSharing bool `mapstructure:"allow_gpu_sharing" yaml:"allow_gpu_sharing" help:"allow several workers on one GPU when the pools need more GPUs than listed"`
	// HealthInterval is the period of the health-check loop over running
	// workers (default 1s).
	HealthInterval time.Duration `mapstructure:"health_interval" yaml:"health_interval" help:"period of the worker health checks"`
	// HealthTimeout bounds one health-check request (default 2s).
	HealthTimeout time.Duration `mapstructure:"health_timeout" yaml:"health_timeout" help:"timeout of one health-check request"`
	// UnhealthyThreshold is how many consecutive failed health checks mark a
	// running worker down (default 3).
	UnhealthyThreshold int `mapstructure:"unhealthy_threshold" yaml:"unhealthy_threshold" help:"consecutive failed health checks that mark a worker down"`
	// ShutdownGrace is how long a worker may take to exit after SIGTERM
	// before it is killed with SIGKILL (default 10s; 0 kills at once).
	ShutdownGrace time.Duration `mapstructure:"shutdown_grace" yaml:"shutdown_grace" help:"time between SIGTERM and SIGKILL when stopping a worker"`
	// WorkersFile is a watched file of pre-launched workers (YAML or JSON:
	// `workers: [{id, url, role[, bootstrap_port]}]`), re-read when it
	// changes: listed workers are added (health-checked like any), workers
	// no longer listed are removed, without a restart. "" for none.
	WorkersFile string `mapstructure:"workers_file" yaml:"workers_file" help:"watched YAML/JSON file of pre-launched workers (workers: [{id, url, role}]); changes apply without restart"`
	// WorkersFileInterval is how often the file is checked for changes
	// (default 1s).
	WorkersFileInterval time.Duration `mapstructure:"workers_file_interval" yaml:"workers_file_interval" help:"how often the workers file is checked for changes"`
	// EtcdURI finds the workers that register themselves in etcd the way
	// TensorRT-LLM workers do (trtllm-serve --server_role ROLE
	// --disagg_cluster_uri etcd://...): etcd://host:port, several separated
	// by commas, as TensorRT-LLM's cluster_uri ("" for none).
	EtcdURI string `mapstructure:"etcd_uri" yaml:"etcd_uri" help:"etcd://host:port[,...] where TensorRT-LLM workers register (empty: none)"`
	// EtcdClusterName is TensorRT-LLM's cluster_name: the workers are the
	// keys under /trtllm-disagg/{etcd_cluster_name}/workers/ (default "").
	EtcdClusterName string `mapstructure:"etcd_cluster_name" yaml:"etcd_cluster_name" help:"TensorRT-LLM cluster_name of the workers in etcd"`
	// EtcdInterval is how often etcd is read (default 1s).
	EtcdInterval time.Duration `mapstructure:"etcd_interval" yaml:"etcd_interval" help:"how often etcd's registered workers are read"`
	// Context is the context (prefill) worker pool; names ctx-0, ctx-1, ...
	Context PoolConfig `mapstructure:"context" yaml:"context"`
	// Generation is the generation (decode) worker pool; names gen-0, gen-1, ...
	Generation PoolConfig `mapstructure:"generation" yaml:"generation"`
}

// PoolConfig describes one pool of identical workers: either launched by duet
// (Count > 0) or pre-launched elsewhere and listed by URLs.
type PoolConfig struct {
	// Engine is the worker program: sim, trtllm, vllm, sglang or command
	// (default sim). See Plan for the exact command each one runs.
	Engine string `mapstructure:"engine" yaml:"engine" help:"worker engine: sim, trtllm, vllm, sglang or command"`
	// Count is the number of workers duet launches. Default -1 (CountAuto):
	// 2, or 0 when URLs are listed. It must be 0 or -1 when URLs are listed:
	// a pool is either launched or pre-launched.
	Count int `mapstructure:"count" yaml:"count" help:"number of workers to launch (-1: 2, or 0 when urls are listed)"`
	// Model is the model the engine serves (a Hugging Face id or a path).
	// Required by trtllm, vllm and sglang; optional for sim (default: the
	// simulator's own) and command ({model} placeholder).
	Model string `mapstructure:"model" yaml:"model" help:"model id or path the engine serves"`
	// Executable overrides the engine's program: the duet binary for sim,
	// trtllm-serve, vllm, or the python interpreter for sglang (default "":
	// the engine's usual name looked up in PATH). Not used by command.
	Executable string `mapstructure:"executable" yaml:"executable" help:"program to run instead of the engine's default (e.g. /opt/venv/bin/vllm)"`
	// GPUsPerWorker is how many GPUs each worker gets (default -1: the
	// engine's default, 0 for sim and command, 1 for the real engines).
	// duet does not set the engine's tensor parallelism: pass it in args or
	// engine_config.
	GPUsPerWorker int `mapstructure:"gpus_per_worker" yaml:"gpus_per_worker" help:"GPUs per worker (-1: engine default, 0 for sim/command, 1 otherwise)"`
	// BasePort is the HTTP port of worker 0; worker i listens on BasePort+i
	// (defaults 8100 for context, 8200 for generation). Ignored when Ports
	// is set.
	BasePort int `mapstructure:"base_port" yaml:"base_port" help:"HTTP port of worker 0; worker i uses base_port+i"`
	// Ports lists the HTTP port of each worker explicitly, one per worker
	// (default empty: use BasePort).
	Ports []string `mapstructure:"ports" yaml:"ports" help:"explicit HTTP port of each worker (overrides base_port)"`
	// SidePortBase is the first side port: vLLM's NIXL side channel
	// (VLLM_NIXL_SIDE_CHANNEL_PORT), or the SGLang disaggregation bootstrap
	// port of sglang and sim workers (a sim worker opens it only when it
	// speaks sglang). Worker i gets SidePortBase + i*stride, where stride is
	// the worker's GPU count (at least 1) for vllm and 1 otherwise (defaults
	// 5600 for context, 5700 for generation). Other engines have no side port.
	SidePortBase int `mapstructure:"side_port_base" yaml:"side_port_base" help:"first vLLM NIXL side-channel / SGLang bootstrap port"`
	// Args are appended to the engine's command line; placeholders are
	// expanded (see Command).
	Args []string `mapstructure:"args" yaml:"args" help:"extra arguments appended to the engine command"`
	// Env adds KEY=VALUE variables to the worker's environment (on top of
	// duet's own environment and the engine's variables); placeholders in
	// values are expanded. A list rather than a map because configuration
	// loaders lowercase map keys.
	Env []string `mapstructure:"env" yaml:"env" help:"extra environment variables as KEY=VALUE"`
	// Command is the command line of engine command, one argument per
	// element. Placeholders: {name} {role} {host} {port} {side_port} {model}
	// {gpus} {run_dir} {index}. Must be empty for the other engines.
	Command []string `mapstructure:"command" yaml:"command" help:"command template for engine command, with {host} {port} {model} {role} {gpus} {run_dir} {name} {side_port} {index}"`
	// HealthPath is the path polled for readiness and liveness; only 200
	// counts as healthy (default /health).
	HealthPath string `mapstructure:"health_path" yaml:"health_path" help:"HTTP path of the health check"`
	// StartTimeout bounds how long a starting worker may take to pass its
	// first health check (default 0: the engine's default, 20s for sim, 60s
	// for command, 10m for trtllm, vllm and sglang).
	StartTimeout time.Duration `mapstructure:"start_timeout" yaml:"start_timeout" help:"time a worker may take to become healthy (0: engine default)"`
	// Restart is the restart policy for workers that exit or fail their
	// health checks.
	Restart RestartPolicy `mapstructure:"restart" yaml:"restart"`
	// EngineConfig is extra engine configuration. trtllm: merged over duet's
	// generated per-worker YAML (passed with --config). vllm: written to a
	// per-worker YAML passed with --config (keys are vLLM CLI option names).
	// Not supported by the other engines. Configuration loaders lowercase
	// map keys; engine keys are lowercase snake/kebab case, so this is safe.
	EngineConfig map[string]any `mapstructure:"engine_config" yaml:"engine_config" help:"extra engine configuration (trtllm: merged into the generated YAML; vllm: passed with --config)"`
	// URLs lists pre-launched workers as base URLs (http://host:port). duet
	// does not manage their processes; it health-checks them and reports
	// them up or down. An SGLang prefill worker's entry may name its
	// bootstrap port after a space, as SGLang's router takes it:
	// "http://10.0.0.5:30000 8998" (without one the decode worker uses its
	// own bootstrap port). Only context pools take one. Requires Count 0 or -1.
	URLs []string `mapstructure:"urls" yaml:"urls" help:"URLs of pre-launched workers (health-checked only); \"URL PORT\" gives an SGLang prefill worker's bootstrap port"`
	// KVEvents says where the pool's workers publish their KV cache events
	// (vLLM's and SGLang's ZMQ publisher, duet sim's), which duet's router
	// subscribes to.
	KVEvents KVEventsConfig `mapstructure:"kv_events" yaml:"kv_events"`
	// LoraAdapters are the LoRA adapters every worker of the pool serves
	// besides its model (default none). The adapters vLLM and SGLang
	// workers list in /v1/models are added to them; TensorRT-LLM lists
	// none, so its adapters must be named here. Launched sim workers get
	// them as --lora-adapters; the real engines need their own flags
	// (vLLM --lora-modules, SGLang --lora-paths) in args.
	LoraAdapters []string `mapstructure:"lora_adapters" yaml:"lora_adapters" help:"LoRA adapters the pool's workers serve"`
}

// KVEventsConfig is a pool's kv_events: section. A worker publishes at
// tcp://<its host>:<its HTTP port + port_offset>; duet starts the workers
// it launches that way (sim: --kv-events-endpoint; vllm and sglang:
// --kv-events-config with endpoint tcp://*:<port>), and pre-launched
// workers must be started so (vLLM: --kv-events-config
// '{"enable_kv_cache_events":true,"publisher":"zmq","endpoint":"tcp://*:PORT"}').
type KVEventsConfig struct {
	// PortOffset is the publisher's port less the worker's HTTP port; 0
	// (the default): the workers publish no events, and the router
	// estimates their caches.
	PortOffset int `mapstructure:"port_offset" yaml:"port_offset" help:"KV events: a worker publishes at its HTTP port + this (0: no events)"`
	// ReplayPortOffset is the publisher's replay socket (vLLM's
	// replay_endpoint), likewise; 0: none (a sequence gap then empties the
	// router's view of the worker until its events agree again).
	ReplayPortOffset int `mapstructure:"replay_port_offset" yaml:"replay_port_offset" help:"KV events: a worker's replay socket is at its HTTP port + this (0: none)"`
}

// Endpoints returns where a worker whose HTTP address is host:port
// publishes its KV events, and its replay socket ("" when none); both ""
// when the pool's workers publish none.
func (k KVEventsConfig) Endpoints(host string, port int) (events, replay string) {
	if k.PortOffset == 0 {
		return "", ""
	}
	events = "tcp://" + net.JoinHostPort(host, strconv.Itoa(port+k.PortOffset))
	if k.ReplayPortOffset != 0 {
		replay = "tcp://" + net.JoinHostPort(host, strconv.Itoa(port+k.ReplayPortOffset))
	}
	return events, replay
}

// Defaults returns the default fleet: two simulated context workers on
// 8100-8101 and two simulated generation workers on 8200-8201.
func Defaults() Config {
	return Config{
		Host:                "127.0.0.1",
		HealthInterval:      time.Second,
		HealthTimeout:       2 * time.Second,
		UnhealthyThreshold:  3,
		ShutdownGrace:       10 * time.Second,
		WorkersFileInterval: time.Second,
		EtcdInterval:        time.Second,
		Context:             defaultPool(8100, 5600),
		Generation:          defaultPool(8200, 5700),
	}
}

func defaultPool(basePort, sidePortBase int) PoolConfig {
	return PoolConfig{
		Engine:        EngineSim,
		Count:         CountAuto,
		GPUsPerWorker: -1,
		BasePort:      basePort,
		SidePortBase:  sidePortBase,
		HealthPath:    "/health",
		Restart:       DefaultRestartPolicy(),
	}
}
