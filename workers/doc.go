// Package workers launches and supervises duet's engine worker fleet: the
// context (prefill) and generation (decode) pools of the `fleet:` config
// section.
//
// The flow is Config -> NewPlan -> New -> Start -> Snapshot/Subscribe ->
// Stop.
//
//   - Config (Defaults, Validate) describes the pools: engine (sim, trtllm,
//     vllm, sglang or a command template), count, model, GPUs, ports, extra
//     args and env, health check, restart policy, or the URLs of
//     pre-launched workers.
//   - NewPlan is pure: it assigns GPUs (without overlap unless sharing is
//     allowed) and ports, and renders each worker's exact command line,
//     environment and generated engine config files. Plan.WriteScript is the
//     dry run; TRTLLMDisaggConfig emits TensorRT-LLM's disagg_config.yaml.
//   - A Fleet runs the plan: every worker in its own process group with its
//     own log file (<run_dir>/<name>.log, lines also logged at debug level
//     with key "worker"), health-checked until ready; then supervised:
//     marked down as soon as it exits or fails unhealthy_threshold health
//     checks in a row, restarted under its RestartPolicy (DecideRestart is
//     the pure decision), marked up only after a health check passes.
//   - AddWorker and RemoveWorker change the membership of a running fleet
//     (duet's admin API): an added worker is external, like one listed in
//     urls, and health-checked by the same loop under the same rules; a
//     removed worker of the plan is reported Removed and keeps running.
//   - Snapshot and Subscribe tell the router which workers are members and
//     up, and what each one's engine reported of itself once its process
//     was up (KV cache size, context length; Options.CacheSize says how to
//     read them). The package knows nothing about routing: cmd connects the
//     two.
//   - Stop sends SIGTERM to every process group, SIGKILL after the grace
//     period. On Linux a worker also gets SIGKILL from the kernel if duet
//     dies (Pdeathsig), so no worker outlives duet.
//
// # Concurrency
//
// Fleet methods are safe for concurrent use, except that Start and Stop
// must not run at the same time. One mutex, Fleet.mu, guards the worker
// list (AddWorker and RemoveWorker change it once Start has succeeded) and
// every worker's mutable state; the notifier has its own mutex, always taken after
// Fleet.mu. Goroutines, each with an owner, a stop signal and a join:
//
//   - one launch goroutine per worker during Start; Start joins them.
//   - per process, a wait goroutine (owns the exec.Cmd: waits for exit,
//     kills the rest of the process group, reaps) and an output goroutine
//     (copies the pipe to the log); the wait goroutine joins the output
//     goroutine, cutting it short after 2s, then closes proc.done. Whoever
//     started the process waits on proc.done.
//   - one supervisor per managed worker, started by Start, stopped by the
//     cancellation of the fleet's run context in Stop; it stops its process
//     before returning. Stop joins it through Fleet.wg.
//   - one health loop (ticker + run context), joined by Stop through
//     Fleet.wg; each round (checkHealth) probes in parallel and joins its
//     probes before applying results.
//   - Stop's own helper that waits for Fleet.wg, joined before Stop returns.
//
// Stop's ctx bounds the grace period: when it ends, the remaining workers
// get SIGKILL at once (Fleet.hurry).
package workers
