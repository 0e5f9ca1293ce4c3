package sim

import (
	crand "crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"sync/atomic"
)

// idSource issues response ids and TensorRT-LLM ctx_request_ids, unique
// within the process and, through a random base, across restarts.
type idSource struct {
	base uint64 // random; the low 30 bits go into ctx_request_ids
	seq  atomic.Uint64
}

func newIDSource() *idSource {
	var b [8]byte
	_, _ = crand.Read(b[:]) // never fails on supported platforms
	return &idSource{base: binary.LittleEndian.Uint64(b[:])}
}

func (ids *idSource) requestID() string {
	var b [16]byte
	binary.BigEndian.PutUint64(b[:8], ids.base)
	binary.BigEndian.PutUint64(b[8:], ids.seq.Add(1))
	return hex.EncodeToString(b[:])
}

// ctxRequestID returns an id above 2^62, so a relay that turns it into a
// float64 visibly corrupts it.
func (ids *idSource) ctxRequestID() uint64 {
	return 1<<62 | (ids.base&(1<<30-1))<<32 | ids.seq.Add(1)&(1<<32-1)
}
