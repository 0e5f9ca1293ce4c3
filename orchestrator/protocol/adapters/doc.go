// Package adapters selects a protocol adapter by its configuration name. It
// is separate from package protocol because it imports the implementations,
// which import protocol.
package adapters
