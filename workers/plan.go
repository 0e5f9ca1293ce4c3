package workers

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/duet-serve/duet/proto/disagg"
)

// Options are the fleet's inputs that are not configuration. The zero value
// is usable.
type Options struct {
	// Executable is the duet binary the sim engine runs as `<Executable> sim
	// ...`. Empty: os.Executable(). A pool's executable overrides it.
	Executable string
	// SimProtocol is the wire protocol of simulated workers, passed as
	// `--protocol` (default "trtllm"). With SimProtocolSGLang a context
	// worker also gets `--bootstrap-port` (its side port).
	SimProtocol string
	// SimArgs are appended to every sim worker's command line before the
	// pool's args: the frontend's tokenizer flags, so that simulated workers
	// count the tokens the frontend counts.
	SimArgs []string
	// Logger receives fleet events (key "worker") and, at debug level, every
	// line the workers print. Nil: no logging.
	Logger *zap.Logger
	// Now is the clock used for restart decisions and state timestamps.
	// Nil: time.Now.
	Now func() time.Time
	// Rand is the source of restart jitter; the fleet serialises its use.
	// Nil: a randomly seeded source.
	Rand *rand.Rand
	// CacheSize says how to read the KV cache size and the context length
	// of a worker of the given engine, read once the worker is up
	// (Worker.KVCacheTokens, Worker.MaxModelLen); a zero reader reads
	// neither. Nil: nothing is read.
	CacheSize func(engine string) CacheSizeReader
	// LookupEnv reads the parent's environment for the default GPU list
	// (CUDA_VISIBLE_DEVICES). Nil: os.LookupEnv.
	LookupEnv func(key string) (string, bool)
}

// SimProtocolSGLang is the SimProtocol under which sim context workers
// serve an SGLang bootstrap port.
const SimProtocolSGLang = "sglang"

func (o Options) withDefaults() Options {
	if o.SimProtocol == "" {
		o.SimProtocol = "trtllm"
	}
	if o.CacheSize == nil {
		o.CacheSize = func(string) CacheSizeReader { return CacheSizeReader{} }
	}
	if o.Logger == nil {
		o.Logger = zap.NewNop()
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Rand == nil {
		o.Rand = rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))
	}
	if o.LookupEnv == nil {
		o.LookupEnv = os.LookupEnv
	}
	return o
}

// Plan is everything a launch will do, computed without side effects: one
// WorkerSpec per worker and the engine config files to write. It is the
// dry-run output and the input of a Fleet.
type Plan struct {
	// RunDir is the absolute run directory (see Config.RunDir). When the
	// configuration leaves it empty, a plan shows AutoRunDir and the fleet
	// creates a fresh directory at launch.
	RunDir string
	// Workers are the workers in order: context pool first, then generation.
	Workers []WorkerSpec
	// Files are the generated engine config files, written at launch.
	Files []File
}

// AutoRunDir is the RunDir a plan shows when the configuration leaves
// run_dir empty; the fleet replaces it with a fresh directory at launch.
var AutoRunDir = filepath.Join(os.TempDir(), "duet-XXXXXX")

// File is a generated file: an engine config a worker's command refers to.
type File struct {
	// Path is the absolute path of the file.
	Path string
	// Content is the exact content written.
	Content []byte
}

// WorkerSpec is one worker as planned: how to run it and where it listens.
type WorkerSpec struct {
	// Name identifies the worker: ctx-0, ctx-1, ..., gen-0, ...
	Name string
	// Role is context or generation.
	Role disagg.Role
	// Index is the worker's position in its pool.
	Index int
	// Engine is the pool's engine.
	Engine string
	// External is true for a pre-launched worker listed by URL: no process,
	// no command, health-checked only.
	External bool
	// Host is the bind address (empty for external workers).
	Host string
	// Port is the HTTP port.
	Port int
	// URL is the worker's base URL, e.g. http://127.0.0.1:8100.
	URL string
	// SidePort is vLLM's NIXL side-channel port or SGLang's bootstrap port;
	// 0 for the other engines and for external workers.
	SidePort int
	// KVEvents is where the worker publishes its KV cache events, and
	// KVEventsReplay its replay socket; "" when none (the pool's
	// kv_events).
	KVEvents, KVEventsReplay string
	// Adapters are the LoRA adapters the pool's configuration says the
	// worker serves (lora_adapters).
	Adapters []string
	// GPUs are the GPU ids in the worker's CUDA_VISIBLE_DEVICES.
	GPUs []string
	// Argv is the command line; Argv[0] is the program (looked up in PATH
	// when it has no slash).
	Argv []string
	// Env holds the KEY=VALUE variables added to duet's own environment, in
	// order; later entries win.
	Env []string
	// LogPath is the worker's log file: <run_dir>/<name>.log.
	LogPath string
	// HealthPath is the path of the health check.
	HealthPath string
	// StartTimeout bounds the wait for the first successful health check.
	StartTimeout time.Duration
	// Restart is the worker's restart policy.
	Restart RestartPolicy
}

// NewPlan validates cfg and computes the launch plan: GPU and port
// assignment, command lines, environments and generated files. It starts
// nothing and writes nothing; errors name the configuration key.
func NewPlan(cfg Config, opts Options) (*Plan, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	opts = opts.withDefaults()
	pools := cfg.pools()
	avail, source := visibleGPUs(cfg, opts.LookupEnv)
	gpus, err := assignGPUs(avail, source, cfg.AllowGPUSharing, pools)
	if err != nil {
		return nil, err
	}
	ports, err := assignPorts(pools, opts.SimProtocol)
	if err != nil {
		return nil, err
	}
	plan := &Plan{RunDir: AutoRunDir}
	if cfg.RunDir != "" {
		if plan.RunDir, err = filepath.Abs(cfg.RunDir); err != nil {
			return nil, fmt.Errorf("run_dir: %w", err)
		}
	}
	if opts.Executable == "" && needsExecutable(cfg) {
		if opts.Executable, err = os.Executable(); err != nil {
			return nil, fmt.Errorf("locating the duet binary for sim workers: %w", err)
		}
	}
	for pi, p := range pools {
		for i, raw := range p.cfg.URLs {
			plan.Workers = append(plan.Workers, externalSpec(p, i, raw))
		}
		for i := 0; i < p.cfg.Count; i++ {
			s := WorkerSpec{
				Name:         fmt.Sprintf("%s-%d", p.abbr, i),
				Role:         p.role,
				Index:        i,
				Engine:       p.cfg.Engine,
				Host:         cfg.Host,
				Port:         ports[pi].http[i],
				GPUs:         gpus[pi][i],
				HealthPath:   p.cfg.HealthPath,
				StartTimeout: p.cfg.startTimeout(),
				Restart:      p.cfg.Restart,
			}
			if ports[pi].side != nil {
				s.SidePort = ports[pi].side[i]
			}
			s.URL = "http://" + net.JoinHostPort(advertisedHost(cfg.Host), strconv.Itoa(s.Port))
			s.KVEvents, s.KVEventsReplay = p.cfg.KVEvents.Endpoints(advertisedHost(cfg.Host), s.Port)
			s.Adapters = p.cfg.LoraAdapters
			s.LogPath = filepath.Join(plan.RunDir, s.Name+".log")
			files, err := buildCommand(&s, p.cfg, plan.RunDir, opts)
			if err != nil {
				return nil, fmt.Errorf("%s: %s: %w", p.key, s.Name, err)
			}
			plan.Workers = append(plan.Workers, s)
			plan.Files = append(plan.Files, files...)
		}
	}
	return plan, nil
}

func needsExecutable(cfg Config) bool {
	for _, p := range cfg.pools() {
		if p.cfg.Engine == EngineSim && p.cfg.Count > 0 && p.cfg.Executable == "" {
			return true
		}
	}
	return false
}

func externalSpec(p pool, i int, raw string) WorkerSpec {
	u, bootstrapPort, _ := ParseURLEntry(raw) // validated
	port, _ := strconv.Atoi(u.Port())
	events, replay := p.cfg.KVEvents.Endpoints(u.Hostname(), port)
	return WorkerSpec{
		KVEvents:       events,
		KVEventsReplay: replay,
		Adapters:       p.cfg.LoraAdapters,
		Name:           fmt.Sprintf("%s-%d", p.abbr, i),
		Role:           p.role,
		Index:          i,
		Engine:         p.cfg.Engine,
		External:       true,
		Port:           port,
		SidePort:       bootstrapPort,
		URL:            strings.TrimSuffix(u.String(), "/"),
		HealthPath:     p.cfg.HealthPath,
		Restart:        p.cfg.Restart,
	}
}

// advertisedHost is the host of worker URLs: the bind address, or the
// loopback address when binding all interfaces.
func advertisedHost(host string) string {
	if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
		return "127.0.0.1"
	}
	return host
}

// withRunDir returns a copy of the plan with every occurrence of the
// placeholder run directory replaced by dir.
func (p *Plan) withRunDir(dir string) *Plan {
	if p.RunDir == dir {
		return p
	}
	r := strings.NewReplacer(p.RunDir, dir)
	out := &Plan{RunDir: dir}
	for _, s := range p.Workers {
		s.Argv = expandAll(r, s.Argv)
		s.Env = expandAll(r, s.Env)
		s.LogPath = r.Replace(s.LogPath)
		out.Workers = append(out.Workers, s)
	}
	for _, f := range p.Files {
		out.Files = append(out.Files, File{Path: r.Replace(f.Path), Content: []byte(r.Replace(string(f.Content)))})
	}
	return out
}
