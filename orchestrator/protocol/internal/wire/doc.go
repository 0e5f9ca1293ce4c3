// Package wire holds the JSON plumbing the protocol adapters share: an
// object whose values stay raw (so a rewrite overrides only the keys duet
// owns and relays everything else byte for byte), JSON literals, and the
// reading of an OpenAI-shaped ctx response into a protocol.Context.
//
// It is internal to orchestrator/protocol: the adapters are its only users.
package wire
