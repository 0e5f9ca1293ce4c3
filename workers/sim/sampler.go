package sim

import (
	"encoding/binary"
	"math/rand/v2"
	"strings"

	"github.com/cespare/xxhash/v2"
)

// sampler produces a request's output tokens deterministically from the
// prompt and seeds: the same prompt gives the same text on every worker, so
// a context worker's first token and a generation worker's continuation
// (or an aggregated run) agree. Every position draws exactly two numbers,
// so skipping to position n replays n draws.
type sampler struct {
	v         *vocab
	rng       *rand.Rand
	eosProb   float64
	minTokens int
	ignoreEOS bool
	pos       int // index of the next token
}

type samplerSpec struct {
	prompt     []int
	workerSeed int64
	reqSeed    *int64
	eosProb    float64
	minTokens  int
	ignoreEOS  bool
}

func newSampler(v *vocab, sp samplerSpec) *sampler {
	seed := promptSeed(sp.prompt) ^ uint64(sp.workerSeed)*0x9e3779b97f4a7c15
	var rs uint64
	if sp.reqSeed != nil {
		rs = uint64(*sp.reqSeed)
	}
	return &sampler{
		v:         v,
		rng:       rand.New(rand.NewPCG(seed, rs^0x5851f42d4c957f2d)),
		eosProb:   sp.eosProb,
		minTokens: sp.minTokens,
		ignoreEOS: sp.ignoreEOS,
	}
}

// promptSeed hashes the prompt's token ids.
func promptSeed(tokens []int) uint64 {
	d := xxhash.New()
	var buf [4]byte
	for _, t := range tokens {
		binary.LittleEndian.PutUint32(buf[:], uint32(t))
		_, _ = d.Write(buf[:])
	}
	return d.Sum64()
}

// next returns the next token and whether it is the end of sequence.
func (s *sampler) next() (id int, eos bool) {
	w := s.rng.IntN(s.v.size())
	u := s.rng.Float64()
	pos := s.pos
	s.pos++
	if !s.ignoreEOS && pos >= s.minTokens && u < s.eosProb {
		return s.v.eos, true
	}
	return s.v.ids[w], false
}

// skip advances past n tokens that were produced elsewhere.
func (s *sampler) skip(n int) {
	for range n {
		s.next()
	}
}

// stopper applies stop strings to streamed text: it holds back text that
// could still become a stop string and truncates at the first match (stop
// text itself is never emitted). Stop strings apply once minTokens tokens
// have been generated, as in vLLM.
type stopper struct {
	stops      []string
	maxLen     int
	minTokens  int
	text       strings.Builder
	sent       int // bytes of text already emitted
	searchFrom int // matches starting before this were checked already
}

func newStopper(stops []string, minTokens int) *stopper {
	st := &stopper{minTokens: minTokens}
	for _, s := range stops {
		if s != "" {
			st.stops = append(st.stops, s)
			st.maxLen = max(st.maxLen, len(s))
		}
	}
	return st
}

// add appends the text of the count-th generated token and returns the
// text that is now safe to emit and whether a stop string matched (the
// sequence then ends with reason "stop").
func (st *stopper) add(piece string, count int) (emit string, stopped bool) {
	if len(st.stops) == 0 {
		return piece, false
	}
	st.text.WriteString(piece)
	all := st.text.String()
	if count < st.minTokens {
		st.searchFrom = max(0, len(all)-st.maxLen+1)
		emit, st.sent = all[st.sent:], len(all)
		return emit, false
	}
	if idx := st.firstMatch(all); idx >= 0 {
		if idx < st.sent { // cannot happen: held-back text covers any match
			idx = st.sent
		}
		emit, st.sent = all[st.sent:idx], idx
		return emit, true
	}
	st.searchFrom = max(0, len(all)-st.maxLen+1)
	safe := max(st.sent, len(all)-st.heldBack(all))
	emit, st.sent = all[st.sent:safe], safe
	return emit, false
}

// rest returns the held-back text when the sequence ends without a match.
func (st *stopper) rest() string {
	if len(st.stops) == 0 {
		return ""
	}
	all := st.text.String()
	r := all[st.sent:]
	st.sent = len(all)
	return r
}

// firstMatch returns the earliest index >= searchFrom where a stop string
// starts, or -1.
func (st *stopper) firstMatch(all string) int {
	best := -1
	for _, s := range st.stops {
		if i := strings.Index(all[st.searchFrom:], s); i >= 0 {
			if j := st.searchFrom + i; best < 0 || j < best {
				best = j
			}
		}
	}
	return best
}

// heldBack is the length of the longest suffix of all that is a proper
// prefix of some stop string.
func (st *stopper) heldBack(all string) int {
	longest := 0
	for _, s := range st.stops {
		for n := min(len(s)-1, len(all)); n > longest; n-- {
			if strings.HasSuffix(all, s[:n]) {
				longest = n
				break
			}
		}
	}
	return longest
}
