// Package kvevents reads (and, for duet's simulated worker, writes) the KV
// cache event streams of inference engines: which KV blocks each engine stored
// and evicted. It is the wire and transport layer only; the router's block
// index consumes it through a Sink.
//
// # Pieces
//
//   - DecodeBatch / EncodeBatch: one msgpack batch payload, vLLM's and SGLang's
//     formats (pure: bytes in, values out).
//   - Subscriber: a ZeroMQ SUB client that checks sequence numbers, fills gaps
//     from the publisher's replay socket, and survives restarts, malformed
//     input and a slow Sink; connect or bind mode.
//   - Publisher: vLLM's ZmqEventPublisher in Go (PUB + ROUTER replay), plus
//     Skip, which numbers a batch its caller lost before publishing it so
//     that subscribers see the loss.
//   - DecodeTRTLLMEvents / Poller: TensorRT-LLM's HTTP event endpoint.
//
// The transport is pure Go (github.com/go-zeromq/zmq4, ZMTP 3.0, NULL
// security); it interoperates with libzmq 4.3 (TestInteropLibzmq, run with
// KVEVENTS_INTEROP_PYTHON=/usr/bin/python3 where python3-zmq is installed).
//
// # vLLM wire format
//
// Source: vllm/distributed/kv_events.py (vllm-project/vllm; the array era as at
// commit b4e69e0af33f4698e157a262cc787fe61983cd3d, the map era as in the
// current file) and vllm/config/kv_events.py (commit 00634b8acf93).
//
// Config (KVEventsConfig, --kv-events-config JSON): publisher "zmq" (the
// default once enable_kv_cache_events is true), endpoint "tcp://*:5557",
// replay_endpoint none, buffer_steps 10000, hwm 100000, max_queue_size
// 100000, topic "". The PUB socket binds when the endpoint contains "*" or
// "::" or is ipc:// or inproc://, and connects otherwise, so a subscriber may
// have to bind (SubscriberConfig.Bind). With data parallelism each DP rank
// publishes on its own port, base port + rank (inproc: suffix "_dp<rank>"),
// so each rank is one Subscriber.
//
// Every message is three frames: topic (UTF-8), sequence number (8 bytes,
// big-endian, from itertools.count(): 0, 1, 2, ... per publisher process),
// payload. The payload is msgspec msgpack of KVEventBatch:
//
//	EventBatch(array_like=True, omit_defaults=True): [ts float64, events, data_parallel_rank?]
//
// data_parallel_rank is stamped by the publisher (so three elements in
// practice); omit_defaults drops it when None. Events are tagged structs
// (tag=True: the tag is the class name, "BlockStored", "BlockRemoved",
// "AllBlocksCleared"), in one of two layouts:
//
//   - LayoutArray, vLLM up to v0.23 (KVCacheEvent array_like=True): the tag is
//     the first element, then the fields in declaration order, trailing
//     fields at their default omitted: ["BlockStored", block_hashes,
//     parent_block_hash, token_ids, block_size, lora_id, medium, lora_name,
//     extra_keys, group_idx, kv_cache_spec_kind,
//     kv_cache_spec_sliding_window]; ["BlockRemoved", block_hashes, medium,
//     group_idx]; ["AllBlocksCleared"]. v0.9 had only the first five fields of
//     BlockStored and block_hashes of BlockRemoved; medium (#19737), lora_name
//     (#27577), extra_keys (#33304), group_idx (#37688) and the spec fields
//     (#40984) were appended since.
//   - LayoutMap, vLLM after #42892 (array_like dropped from the events only; a
//     vLLM 0.26.0 capture in volcano-sh/kthena#1535 shows it): {"type":
//     "BlockStored", "block_hashes": ..., ...}; fields without a default
//     (block_hashes ... lora_name; BlockRemoved: block_hashes, medium) are
//     always present, null when None, the others only when set. Newer fields:
//     event_version (default 1), locality, ownership, session_id.
//
// Block hashes (ExternalBlockHash = bytes | int): raw digest bytes (sha256,
// 32 bytes, or xxh3-128, 16) by default; with
// VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES the low 64 bits of the big-endian digest
// as an unsigned integer (maybe_convert_block_hash in
// vllm/v1/core/kv_cache_utils.py). msgspec writes integers in their shortest
// msgpack form, floats as float64, str as fixstr/str8/16/32, bytes as bin.
//
// Replay: a client sends the start sequence number as one 8-byte big-endian
// frame behind an empty delimiter (a REQ or DEALER), so the ROUTER receives
// [identity, "", start] (any other shape is ignored). It answers, for each
// buffered batch with seq >= start (a linear scan of a deque of buffer_steps),
// [identity, "", topic, seq, payload], then the end marker [identity, "", "",
// -1 (8 bytes, signed), ""]. Older vLLM (and SGLang) omit the topic frame:
// [identity, "", seq, payload] and [identity, "", -1, ""]. The Subscriber
// reads both.
//
// # SGLang wire format
//
// Source: python/sglang/srt/disaggregation/kv_events.py (sgl-project/sglang;
// commit 612d579090db24ec7c47cc5ca6b83e0c649b8c28 for the array era), enabled
// by --kv-events-config with the same KVEventsConfig fields and defaults as
// vLLM (publisher default "null"). Framing, sequence numbers, the
// bind-or-connect rule and the DP port offset are vLLM's; the batch's third
// element is attn_dp_rank (per attention-DP rank, or the DP rank). Variants:
//
//   - early: as vLLM v0.9 (five BlockStored fields, BlockRemoved
//     [tag, block_hashes]), omit_defaults, so the rank may be absent;
//   - later: medium appended (default None) and omit_defaults dropped from the
//     batch and the events, so every field is written, null when unset:
//     [ts, events, attn_dp_rank-or-null], ["BlockStored", ..., lora_id,
//     medium]; a salted store appends a metadata map {"cache_salt": s} where
//     vLLM has lora_name (BlockStoredWithMetadata);
//   - after #37482: events are tagged maps like vLLM's, with cache_salt and
//     session_id fields; the batch stays an array.
//
// Block hashes are signed 64-bit integers (hash_str_to_int64), so often
// negative; media are "GPU", "CPU_PINNED", "DISK", "EXTERNAL". With EAGLE's
// bigram radix cache token_ids may hold (token, next_token) pairs; the token is
// kept. Replay replies carry no topic frame (above).
//
// # TensorRT-LLM
//
// trtllm-serve registers POST /kv_cache_events
// (tensorrt_llm/serve/openai_server.py, NVIDIA/TensorRT-LLM commit 00057725),
// which drains the engine's event queue (get_kv_cache_events_async, 2 s
// timeout) and returns a JSON array built by KVCacheEventSerializer
// (tensorrt_llm/_utils.py): {"event_id", "data", "window_size",
// "attention_dp_rank"?} with data {"type": "created",
// "num_blocks_per_cache_level"} | {"type": "stored", "parent_hash", "blocks":
// [{"type": "stored_block", "block_hash", "tokens": [{"type": "unique_token",
// "token_id", "token_extra_id"}], "cache_level", "priority"}]} | {"type":
// "removed", "block_hashes"} | {"type": "updated", "block_hash",
// "cache_level": {"new_value", "old_value"}, "priority": {...}}. Hashes are
// unsigned 64-bit integers. Poller pulls it; there is no replay, so an
// event-id break resets. A newer TensorRT-LLM also ships a ZeroMQ publisher
// in this package's format (map events, integer hashes) that sends an empty
// batch as a heartbeat every 5 s, numbers batches from its wall clock in
// nanoseconds (a restart jumps forward, which the Subscriber resets on), and
// publishes AllBlocksCleared after it loses batches.
//
// # Bounds
//
// A payload is at most MaxPayloadBytes, a batch at most MaxEventsPerBatch
// events, an event at most MaxHashesPerEvent hashes and MaxTokensPerEvent
// tokens; nesting inside skipped fields at most 32 deep. Every ZeroMQ socket
// this package opens uses a transport that refuses a message over
// MaxPayloadBytes + 1 MiB before zmq4 allocates it. The Subscriber queue holds
// QueueSize batches; the Publisher buffers BufferSteps batches and HWM queued
// messages; a replay reads at most MaxReplayBatches replies.
//
// # Recovery
//
// Per topic the Subscriber expects seq = last+1. A later seq is a gap: it asks
// the replay endpoint for batches from last (not last+1), checks that the
// first reply is the batch it already has (same seq, same payload hash), so a
// restarted publisher whose numbers ran past ours is not spliced in, then
// queues last+1 ... seq-1. If that fails (no replay endpoint, buffer too
// short, timeout, mismatch) the topic is Reset. A seq not after last means a
// new publisher: Reset. An undecodable frame or payload: counted, Reset,
// continue. A Publisher whose caller lost a batch before publishing it skips
// that batch's sequence number (Publisher.Skip); no replay buffer holds it, so
// the next batch's gap resets. The protocol has no snapshot: after a Reset, or when the
// Subscriber starts after the engine, the Sink learns only blocks stored from
// then on.
//
// # Concurrency
//
// Subscriber.Run runs the network reader in the caller's goroutine and starts
// one goroutine that calls the Sink; the two share only a bounded channel, of
// which the reader is the only sender. Run stops when its context is done: the
// socket is closed (unblocking the read), the channel closed, and Run returns
// after the Sink goroutine has delivered what was queued. Replay requests are
// made by the reader itself, on a DEALER socket it opens and closes per
// request under ReplayTimeout. Stats and Addr are safe from any goroutine
// (atomics). zmq4 runs goroutines of its own per socket and connection; they
// end when the socket is closed.
//
// Publisher.Publish is safe for concurrent use; a mutex orders sequence
// assignment, send and buffering. NewPublisher starts a replay goroutine when
// a replay endpoint is set (and, with Connect, a dialling goroutine); Close
// cancels them, closes the sockets and waits for them.
//
// Known leak: every Publisher leaves one goroutine behind after Close, zmq4
// v0.17.0's (*pubMWriter).run, parked in sync.Cond.Wait and holding the PUB
// socket's (closed) connections. zmq4 starts it in NewPub and stops it only in
// pubMWriter.Close, which the socket's Close never calls; nothing exported
// reaches it (no option, no close order), and an XPUB socket (the only other
// type a SUB accepts) uses the same writer. So a process leaks one small
// goroutine per Publisher it creates: nothing for an engine or a `duet sim`
// worker (one each), a few hundred in a test binary.
// TestPublisherCloseLeavesOnlyZmq4Writer pins this: everything else ends. zmq4's
// unreleased master (826b120, 2024-06-18) rewrote that writer without the
// goroutine; whether it ends the leak is unverified, and this module stays
// on the release.
//
// Poller.Run polls from the caller's goroutine and calls the Sink from it;
// PollOnce is one round, for tests. DecodeBatch, EncodeBatch and
// DecodeTRTLLMEvents are pure and safe for concurrent use.
package kvevents
