package kvevents

import (
	"bytes"
	"fmt"

	"github.com/vmihailenco/msgpack/v5"
)

// EncodeBatch encodes b the way vLLM's ZmqEventPublisher does (msgspec
// msgpack of KVEventBatch, vllm/distributed/kv_events.py), byte for byte: the
// batch as [ts, events] plus data_parallel_rank when set, ts as a float64,
// integers in their shortest form, strings as fixstr/str8/16/32, block hashes
// as unsigned integers or bin. Topic and Seq are not part of the payload.
//
// With LayoutMap (vLLM after #42892) each event is a map: "type", then the
// fields that have no default (always, null when unset), then the optional
// fields that are set, in declaration order; with LayoutArray (vLLM up to
// v0.23) it is an array with the tag first and trailing unset optional fields
// omitted. Fields vLLM's array layout never had (locality, ownership,
// session_id, cache_salt) are dropped there; CacheSalt, an SGLang field, is
// written as "cache_salt" in the map layout. EncodeBatch fails on a nil or
// unknown event.
func EncodeBatch(b Batch, layout Layout) ([]byte, error) {
	if layout != LayoutMap && layout != LayoutArray {
		return nil, fmt.Errorf("kvevents: unknown layout %d", layout)
	}
	var buf bytes.Buffer
	e := encoder{enc: msgpack.NewEncoder(&buf), layout: layout}
	n := 2
	if b.DataParallelRank != nil {
		n = 3
	}
	e.arrayLen(n)
	e.float(b.TS)
	e.arrayLen(len(b.Events))
	for i, ev := range b.Events {
		if err := e.event(ev); err != nil {
			return nil, fmt.Errorf("kvevents: events[%d]: %w", i, err)
		}
	}
	if b.DataParallelRank != nil {
		e.int(*b.DataParallelRank)
	}
	if e.err != nil {
		return nil, fmt.Errorf("kvevents: encode: %w", e.err)
	}
	return buf.Bytes(), nil
}

// encoder wraps msgpack.Encoder, keeping the first error.
type encoder struct {
	enc    *msgpack.Encoder
	layout Layout
	err    error
}

func (e *encoder) keep(err error) {
	if e.err == nil {
		e.err = err
	}
}

func (e *encoder) arrayLen(n int) { e.keep(e.enc.EncodeArrayLen(n)) }
func (e *encoder) mapLen(n int)   { e.keep(e.enc.EncodeMapLen(n)) }
func (e *encoder) float(v float64) {
	e.keep(e.enc.EncodeFloat64(v))
}
func (e *encoder) int(v int64)     { e.keep(e.enc.EncodeInt(v)) }
func (e *encoder) str(s string)    { e.keep(e.enc.EncodeString(s)) }
func (e *encoder) nilValue()       { e.keep(e.enc.EncodeNil()) }
func (e *encoder) raw(p []byte)    { e.keep(e.enc.Encode(msgpack.RawMessage(p))) }
func (e *encoder) optStr(s string) { e.optional(s != "", func() { e.str(s) }) }

func (e *encoder) optInt(v *int64) {
	e.optional(v != nil, func() { e.int(*v) })
}

func (e *encoder) optional(set bool, write func()) {
	if set {
		write()
	} else {
		e.nilValue()
	}
}

func (e *encoder) hash(h BlockHash) {
	if h.isb {
		e.keep(e.enc.EncodeBytes([]byte(h.raw)))
		return
	}
	e.keep(e.enc.EncodeUint(h.key))
}

func (e *encoder) hashes(hs []BlockHash) {
	e.arrayLen(len(hs))
	for _, h := range hs {
		e.hash(h)
	}
}

// field is one event field: its name, whether it must be written, and how.
type field struct {
	name  string
	set   bool // false: an optional field at its default
	write func()
}

func (e *encoder) event(ev Event) error {
	var tag string
	var fields []field
	switch ev := ev.(type) {
	case *BlockStored:
		tag, fields = tagBlockStored, e.storedFields(ev)
	case *BlockRemoved:
		tag, fields = tagBlockRemoved, e.removedFields(ev)
	case *AllBlocksCleared:
		tag = tagAllBlocksCleared
	default:
		return fmt.Errorf("unknown event %T", ev)
	}
	if e.layout == LayoutArray {
		e.arrayFields(tag, fields)
	} else {
		e.mapFields(tag, fields)
	}
	return nil
}

// arrayFields writes [tag, fields...] without the trailing unset ones
// (msgspec array_like with omit_defaults). Fields with no array position are
// absent from fields.
func (e *encoder) arrayFields(tag string, fields []field) {
	n := len(fields)
	for n > 0 && !fields[n-1].set {
		n--
	}
	e.arrayLen(1 + n)
	e.str(tag)
	for _, f := range fields[:n] {
		f.write()
	}
}

func (e *encoder) mapFields(tag string, fields []field) {
	n := 1
	for _, f := range fields {
		if f.set {
			n++
		}
	}
	e.mapLen(n)
	e.str("type")
	e.str(tag)
	for _, f := range fields {
		if f.set {
			e.str(f.name)
			f.write()
		}
	}
}

// storedFields lists BlockStored's fields in vLLM's declaration order. The
// first seven have no default, so they are always written.
func (e *encoder) storedFields(ev *BlockStored) []field {
	always := true
	fields := []field{
		{"block_hashes", always, func() { e.hashes(ev.BlockHashes) }},
		{"parent_block_hash", always, func() { e.optional(ev.HasParent, func() { e.hash(ev.ParentBlockHash) }) }},
		{"token_ids", always, func() {
			e.arrayLen(len(ev.TokenIDs))
			for _, t := range ev.TokenIDs {
				e.int(int64(t))
			}
		}},
		{"block_size", always, func() { e.int(int64(ev.BlockSize)) }},
		{"lora_id", always, func() { e.optInt(ev.LoraID) }},
		{"medium", always, func() { e.optStr(ev.Medium) }},
		{"lora_name", always, func() { e.optStr(ev.LoraName) }},
	}
	if e.layout == LayoutMap && ev.EventVersion != 0 && ev.EventVersion != 1 {
		fields = append(fields, field{"event_version", true, func() { e.int(ev.EventVersion) }})
	}
	fields = append(fields,
		field{"extra_keys", ev.ExtraKeys != nil, func() { e.optional(ev.ExtraKeys != nil, func() { e.raw(ev.ExtraKeys) }) }},
		field{"group_idx", ev.GroupIdx != nil, func() { e.optInt(ev.GroupIdx) }},
		field{"kv_cache_spec_kind", ev.KVCacheSpecKind != "", func() { e.optStr(ev.KVCacheSpecKind) }},
		field{"kv_cache_spec_sliding_window", ev.KVCacheSpecSlidingWindow != nil, func() { e.optInt(ev.KVCacheSpecSlidingWindow) }},
	)
	if e.layout == LayoutMap {
		fields = append(fields,
			field{"locality", ev.Locality != "", func() { e.str(ev.Locality) }},
			field{"ownership", ev.Ownership != "", func() { e.str(ev.Ownership) }},
			field{"session_id", ev.SessionID != "", func() { e.str(ev.SessionID) }},
			field{"cache_salt", ev.CacheSalt != "", func() { e.str(ev.CacheSalt) }},
		)
	}
	return fields
}

func (e *encoder) removedFields(ev *BlockRemoved) []field {
	fields := []field{
		{"block_hashes", true, func() { e.hashes(ev.BlockHashes) }},
		{"medium", true, func() { e.optStr(ev.Medium) }},
		{"group_idx", ev.GroupIdx != nil, func() { e.optInt(ev.GroupIdx) }},
	}
	if e.layout == LayoutMap {
		fields = append(fields,
			field{"locality", ev.Locality != "", func() { e.str(ev.Locality) }},
			field{"ownership", ev.Ownership != "", func() { e.str(ev.Ownership) }},
		)
	}
	return fields
}
