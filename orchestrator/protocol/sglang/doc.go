// Package sglang is the protocol adapter for SGLang prefill and decode
// workers, which bootstrap the KV transfer themselves (PROTOCOLS.md §3).
//
// Both legs get the same body: the client's body plus bootstrap_host (the
// ctx worker's host), bootstrap_port (its bootstrap port, default 8998) and
// bootstrap_room (Input.Room). The orchestrator sends them at the same
// time, relays the decode response and drains the prefill response.
//
// # Concurrency
//
// Adapter is stateless and safe for concurrent use.
package sglang
