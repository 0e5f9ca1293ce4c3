package replay

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/duet-serve/duet/router"
	"github.com/duet-serve/duet/workers/sim/model"
)

// mooncakeLike writes a trace shaped like the Mooncake FAST'25 conversation
// trace (12,031 requests over an hour, mean input ~13.6k tokens, 512-token
// hash blocks, every request sharing block 0, most requests extending an
// earlier one of their conversation), for the speed benchmark: the real
// trace is not shipped.
func mooncakeLike(requests int) []byte {
	rng := rand.New(rand.NewPCG(1, 2))
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	type conv struct{ ids []int64 }
	var convs []*conv
	next := int64(1)
	for i := 0; i < requests; i++ {
		var c *conv
		if len(convs) > 0 && rng.Float64() < 0.75 {
			c = convs[rng.IntN(len(convs))]
		} else {
			c = &conv{ids: []int64{0}}
			for range 10 + rng.IntN(30) {
				c.ids = append(c.ids, next)
				next++
			}
			convs = append(convs, c)
		}
		for range 1 + rng.IntN(4) {
			c.ids = append(c.ids, next)
			next++
		}
		if len(c.ids) > 60 {
			c.ids = c.ids[:20] // a conversation that outgrew the trace's lengths starts over
		}
		ids := append([]int64(nil), c.ids...)
		_ = enc.Encode(map[string]any{"timestamp": i * 3600000 / requests, "input_length": len(ids)*512 - rng.IntN(512),
			"output_length": 50 + rng.IntN(500), "hash_ids": ids})
	}
	return b.Bytes()
}

// BenchmarkReplayMooncakeLike replays a 12,031-request trace of the
// published one's shape through the conversation policy on 4 + 4 workers
// (the bound: the whole trace in 10 s).
func BenchmarkReplayMooncakeLike(b *testing.B) {
	b.Run("estimate", func(b *testing.B) { benchmarkMooncakeLike(b, false) })
	b.Run("events", func(b *testing.B) { benchmarkMooncakeLike(b, true) })
}

// benchmarkMooncakeLike replays a synthetic trace of the Mooncake hour's
// shape, with the index fed by the modelled workers' events or not.
func benchmarkMooncakeLike(b *testing.B, events bool) {
	trace := mooncakeLike(12031)
	w := WorkerModel{KVCapacityBlocks: 20000, BlockSize: 32, MaxNumSeqs: 256, Timing: model.Timing{Scale: 1, PrefillRate: 20000,
		PrefillOverhead: 10 * time.Millisecond, ITLBase: 7 * time.Millisecond, ITLPerSeq: 50 * time.Microsecond,
		TransferRate: 200000, TransferOverhead: 2 * time.Millisecond}}
	cfg := Config{Router: router.Defaults(), Fleet: Fleet{NCtx: 4, NGen: 4, Ctx: w, Gen: w}, FixedSchedule: true, Speedup: 1,
		DefaultMaxTokens: 256, OracleBlockSize: 32, KVEvents: events}
	for b.Loop() {
		sessions, err := MooncakeSessions(bytes.NewReader(trace), 512)
		if err != nil {
			b.Fatal(err)
		}
		res, err := Run(cfg, sessions)
		if err != nil {
			b.Fatal(err)
		}
		if len(res.Records) != 12031 {
			b.Fatalf("%d records", len(res.Records))
		}
	}
}
