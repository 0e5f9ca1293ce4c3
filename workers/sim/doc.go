// Package sim is duet's simulated GPU engine worker: a fasthttp server that
// speaks the wire protocols of a TensorRT-LLM, vLLM or SGLang worker and
// models what matters for routing and time to first token, without a GPU.
//
// # Endpoints
//
//	POST /v1/chat/completions, /v1/completions   OpenAI, streaming (SSE) and not
//	GET  /v1/models, /health, /metrics           model list as the engine writes it (models.go), liveness, Prometheus text
//	POST /internal/kv/pull                       worker to worker: take over a pinned KV handle
//	POST /reset_prefix_cache                     vLLM's: drop every cached block, {"success": bool}
//	GET|POST|DELETE /admin/faults                show, patch, reset fault injection
//
// An SGLang context worker also serves its bootstrap server on
// bootstrap_port (net/http, bootstrap.go): GET /health, SGLang's
// GET /route rank queries, and POST /rooms/{room}/pull, through which a
// decode waits for and takes over the KV of a bootstrap_room.
//
// Requests carry TensorRT-LLM's disaggregated_params (protocol trtllm) or
// vLLM's kv_transfer_params (protocol vllm); without them a request is served
// aggregated (prefill and decode here), which conditional disaggregation and
// mixed workers use. A context worker rejects generation requests and a
// generation worker context requests (400); a mixed worker takes all.
//
// Protocol trtllm rejects a request whose top level has a field that
// TensorRT-LLM's ChatCompletionRequest or CompletionRequest lacks
// (trtfields.go: pydantic extra="forbid"; continue_final_message is one),
// with TensorRT-LLM's 400; vLLM and SGLang ignore unknown fields. With
// prompt_token_ids a trtllm chat request takes its prompt from the ids and
// may have empty messages.
//
// Protocol sglang works the other way round, as SGLang does: both legs get
// the same body (the client's plus bootstrap_host, bootstrap_port and
// bootstrap_room) and the worker's role, not the body, says what to do. A
// context worker prefills, a generation worker decodes, a mixed worker
// serves everything aggregated and ignores the bootstrap fields. A prefill
// or decode without bootstrap_room is a 400, and SGLang's error shape is
// used: a flat {"object":"error","message","type","param","code":<int>}, or
// for errors SGLang reports after a stream began (transfer failures, a
// missing room) a 200 SSE stream with one {"error": {...}} event and
// [DONE].
//
// LoRA adapters (lora.go): the worker serves the adapters named in
// lora_adapters on top of its model, and a request selects one as the
// protocol's engine reads it: vLLM "model": "<adapter>", SGLang
// "model": "<model>:<adapter>" or "lora_path", TensorRT-LLM "lora_request"
// (trtlora.go). An unknown adapter gets the engine's error; vLLM and
// SGLang list the adapters on /v1/models. An adapter's blocks are its own
// in the KV cache (salted hashes) and its KV events name it.
//
// # Models
//
// KV cache (kvcache.go): paged blocks of block_size tokens, prefix reuse by
// chained block hash, reference counts, LRU eviction of unreferenced blocks
// only. A request reserves blocks for its prompt plus max output at
// admission and waits (counted as waiting) when they cannot be freed. When
// it ends, the blocks of its prompt and output are registered, so the next
// turn of a conversation, whose prompt is the previous prompt plus the reply,
// finds them. usage.prompt_tokens_details.cached_tokens is what was found.
//
// KV events (kvevents.go, kvpublish.go): with kv_events_endpoint set
// (default off) the worker binds a ZeroMQ PUB socket there, and a ROUTER
// replay socket on kv_events_replay_endpoint, and publishes its cache's
// events in vLLM's wire format through proto/kvevents' Publisher:
// BlockStored when a sequence commits blocks (token ids, parent hash, the
// sim's chained hashes as integers), BlockRemoved on eviction,
// AllBlocksCleared on POST /reset_prefix_cache. A scheduler step's events
// are one batch (more when large). The model.KVCache tells its Observer,
// the sink, under the scheduler lock; the sink queues batches without
// blocking, dropping (and counting) a batch when the bounded queue is full;
// the publishing goroutine then skips the dropped batch's sequence number
// (kvevents.Publisher.Skip) before the next batch, so a subscriber sees a
// gap that replay cannot fill and resets.
//
// Timing (timing.go), every duration times time_scale: first token at
// queueing + uncached/prefill_tokens_per_sec + prefill_overhead, the token
// compute being one FIFO server shared by all requests (the overhead is
// per-request latency that does not queue); then one token per
// itl_base + itl_per_seq*running, paced on a deadline schedule. A generation
// request instead pays kv_transfer_overhead + missing/kv_transfer_tokens_per_sec
// for the prompt tokens it does not already hold. Responses carry the
// modelled numbers in X-Duet-Sim-Cached-Tokens, X-Duet-Sim-Modelled-Us and
// X-Duet-Sim-TTFT-Us.
//
// Output (vocab.go, sampler.go): deterministic words drawn from a seed of the
// prompt tokens, the seed key and the request's seed; each word is one token
// that re-encodes to itself, so a reply sent back in the next turn tokenizes
// to the same ids. max_tokens, max_completion_tokens, min_tokens, ignore_eos,
// stop and a per-token EOS chance (eos_probability) are honoured.
//
// # Disaggregation
//
// A context request prefills, samples the first token and pins the prompt's
// blocks under a key (TensorRT-LLM: ctx_request_id, with this worker's URL in
// encoded_opaque_state; vLLM: remote_request_id at remote_host:remote_port).
// A generation request pulls that key over HTTP from the context worker,
// which releases the pin; a key is valid once and for kv_transfer_timeout.
// An unknown, reused or expired key is a 400 on the generation worker. The
// generation worker trusts the URL in the request, as engines trust their
// router: it must not be reachable by untrusted clients directly.
//
// SGLang (sglang.go, bootstrap.go, meet.go, answer_sglang.go): the legs run
// concurrently and meet by room. The prefill pins the prompt under the room
// and holds its response until a decode has taken the pin, then answers a
// normal completion (streamed if asked) with the first token and
// finish_reason "length"; a room nobody takes within kv_transfer_timeout is
// SGLang's KVPoll.Bootstrapping timeout, a 500. The decode is admitted at
// once (holding its KV reservation, as SGLang preallocates), then asks
// bootstrap_host:bootstrap_port for the room (a null port means its own
// bootstrap_port), long-polling until the prefill has pinned it, so it may
// arrive first; it then pays the modelled transfer of the blocks it lacks
// and decodes. A room that never appears, or a bootstrap server that cannot
// be reached (retried), fails after kv_transfer_timeout with SGLang's
// KVPoll.WaitingForInput timeout, a 500; a server that answers anything else
// (a wrong port that hits another HTTP server) fails at once.
//
// # Faults
//
// fault_error_rate answers 500; fault_hang_rate holds the connection with no
// response until the client leaves (or fault_hang_max); fault_die_rate ends a
// stream after fault_die_after_tokens tokens without [DONE] and closes the
// connection (a non-streaming request gets the connection closed with no
// response); fault_slow_factor multiplies modelled durations. Three faults
// break the wire itself, a stream at fault_die_after_tokens tokens, a
// non-streaming request at once: fault_garbage_rate sends an event that is
// not JSON (then the stream goes on), or a 200 body that is an HTML page or
// truncated JSON; fault_cut_rate closes the connection in the middle of an
// event and of its HTTP chunk, or halfway through a body; fault_stall_rate
// stops sending (a non-streaming request after its headers) and holds the
// connection until the client leaves or fault_hang_max passes.
// Two faults fail a generation inside the engine and report it as the
// protocol's engine does (enginefail.go): fault_error_event_rate after
// fault_die_after_tokens tokens (a context leg at once), vLLM and SGLang
// with a 500 error event and [DONE] in the stream, TensorRT-LLM by cutting
// the stream without [DONE], and a non-streaming request with the engine's
// error response (vLLM 500, SGLang 500, TensorRT-LLM 400 BadRequestError);
// fault_kv_pull_fail_rate on a generation request with a KV handle, when
// its transfer would have ended (vLLM: role chunk, error event, [DONE];
// SGLang: a "Decode transfer failed" error event; TensorRT-LLM: the stream
// cut before any event; non-streaming 500, 500, 400). A failed pull takes
// nothing from the context worker, which keeps its pin until
// kv_transfer_timeout.
// Two faults break the KV event stream (kvevents.go), for testing a router
// that checks events against the cached_tokens a worker reports:
// kv_events_paused (a setting, only with KV events on) discards the events
// of every scheduler step that ends while it is set, with no sequence gap
// and no AllBlocksCleared, and publishing resumes with the next step once
// it is cleared; reset_cache_silently (an action: true runs it once, GET
// never shows it) drops every cached block as POST /reset_prefix_cache
// does, without AllBlocksCleared, and where that reset fails while blocks
// are referenced, it drops only the unreferenced ones and keeps what
// running or pinned sequences hold.
// POST /admin/faults takes a JSON object with any of error_rate, hang_rate,
// hang_max ("30s"), die_rate, die_after_tokens, slow_factor, garbage_rate,
// cut_rate, stall_rate, error_event_rate, kv_pull_fail_rate,
// kv_events_paused and reset_cache_silently; it is not authenticated (the
// sim is a test tool).
//
// # Metrics
//
// /metrics writes the Prometheus text format by hand: the module's go.sum
// lacks client_golang's dependencies, and the exposition is a few lines.
// Names: vllm:num_requests_running, vllm:num_requests_waiting,
// vllm:kv_cache_usage_perc, vllm:prefix_cache_queries_total,
// vllm:prefix_cache_hits_total, vllm:prompt_tokens_total,
// vllm:generation_tokens_total and duet_sim_*, among them
// duet_sim_kv_events_total and duet_sim_kv_event_batches_total by outcome
// (published, dropped, failed, paused), and duet_sim_faults_injected_total
// by kind (reset_cache_silently counts its triggers).
//
// # Concurrency
//
// A Server is safe for concurrent use. State and its guards:
//
//   - scheduler.mu guards the KV cache (not goroutine-safe itself), the
//     waiting queue, the pins and the pin-added signal that room waiters
//     block on; the running count is an atomic written under it and read
//     lock-free by decode loops. A pin's watch (SGLang) is closed under it
//     when the pin is taken or dropped.
//   - model.PrefillQueue.mu guards the prefill server's busy-until time.
//   - scheduler.mu also guards the KV event sink's open batch: the cache
//     calls the sink under it, and scheduler.unlock hands the step's batch
//     to the publishing goroutine's bounded channel (never blocking) before
//     releasing it.
//   - faults.mu guards the fault settings and their random source. The KV
//     event sink reads kv_events_paused under scheduler.mu, so faults.mu
//     is taken after scheduler.mu, never before it.
//   - counters are atomics.
//
// Goroutines and their owners:
//
//   - Serve starts fasthttp's Serve and the pin expiry loop, on an SGLang
//     context worker the bootstrap server's net/http Serve, and with KV
//     events the publishing goroutine (kvEventPublisher.run); it stops all
//     of them and joins them before returning. The publisher is stopped
//     last: it publishes what is queued, then its sockets are closed. The bootstrap server is
//     shut down last, after the abort, so that decodes can still take rooms
//     during the grace period.
//   - fasthttp runs each handler, each stream writer (the goroutine of
//     SetBodyStreamWriter) and each hijacked connection of a hang, cut or
//     stall fault (a cut or stalled stream runs its whole exchange there).
//     Handlers that wait (admission, prefill, an SGLang prefill waiting for
//     its room to be taken, a decode waiting for its room) and stream
//     writers watch the server's abort context; hangs watch the stopping
//     channel. Bootstrap handlers (net/http goroutines) wait for a room at
//     most maxRoomWait and end when their request or the abort context ends. Serve's
//     shutdown lets in-flight requests finish for shutdown_timeout, then
//     aborts them and waits (bounded) until every stream writer and hang has
//     returned.
//   - A client that goes away is noticed at the next write of its stream;
//     the stream writer then returns and releases the sequence.
//
// Every admitted sequence ends exactly once (lease.finish or lease.pin), on
// every path, so running counts, references and pins return to zero.
package sim
