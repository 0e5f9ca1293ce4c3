package replay

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"time"

	"github.com/cespare/xxhash/v2"
	"github.com/duet-serve/duet/tests/loadgen"
	"github.com/duet-serve/duet/tokenizer"
)

// chatSession is a duet bench session (synthetic or from a multi_turn or
// single_turn file): each turn's prompt is the ChatML rendering duet's
// frontend tokenizes, with the modelled replies of the turns before it.
type chatSession struct {
	s        *loadgen.Session
	tr       loadgen.Transcript
	tok      *tokenizer.Tokenizer
	corpus   *loadgen.Corpus
	rng      *rand.Rand
	endpoint string
}

// ChatSessions wraps duet bench sessions. Replies are corpus text of the
// turn's output length, the same for the same seed.
func ChatSessions(sessions []*loadgen.Session, tok *tokenizer.Tokenizer, corpus *loadgen.Corpus, endpoint string, seed uint64) []Session {
	out := make([]Session, len(sessions))
	for i, s := range sessions {
		out[i] = &chatSession{s: s, tr: loadgen.NewTranscript(s), tok: tok, corpus: corpus,
			rng: rand.New(rand.NewPCG(seed, uint64(i))), endpoint: endpoint}
	}
	return out
}

func (c *chatSession) ID() string { return c.s.ID }
func (c *chatSession) Turns() int { return len(c.s.Turns) }

func (c *chatSession) Turn(k int) (int, time.Duration) {
	t := c.s.Turns[k]
	if k == 0 {
		return t.MaxTokens, t.Timestamp
	}
	return t.MaxTokens, t.Delay
}

func (c *chatSession) Prompt(k int) []int { return c.tr.Prompt(c.tok, c.endpoint, k) }

func (c *chatSession) Answered(k int, output int) []int {
	reply := c.corpus.Text(c.rng, output)
	c.tr.Answered(k, reply)
	if c.s.Stateless {
		return nil
	}
	return c.tok.Encode(reply)
}

// traceRow is one request of a mooncake_trace file (the Mooncake FAST'25
// traces, aiperf's mooncake_trace dataset): timestamp in ms, lengths in
// tokens, one hash id per block of HashBlockSize tokens.
type traceRow struct {
	Timestamp    *float64 `json:"timestamp"`
	InputLength  int      `json:"input_length"`
	OutputLength int      `json:"output_length"`
	HashIDs      []int64  `json:"hash_ids"`
	SessionID    string   `json:"session_id"`
	Delay        float64  `json:"delay"`
}

// traceSession is a mooncake row (or the rows of one session_id): its
// prompt's tokens are made from its hash ids, so that equal ids give equal
// blocks, without text or tokenizer.
type traceSession struct {
	id        string
	rows      []traceRow
	blockSize int
}

// MooncakeSessions reads a mooncake_trace JSONL: one session per row, or
// per session_id when rows carry one (their turns in file order, each after
// the previous one ends plus its delay in ms). Rows hold block hash ids of
// blockSize tokens (512 in the published traces).
func MooncakeSessions(r io.Reader, blockSize int) ([]Session, error) {
	var out []Session
	byID := map[string]*traceSession{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 1<<20), 64<<20)
	for line := 1; sc.Scan(); line++ {
		if len(sc.Bytes()) == 0 {
			continue
		}
		var row traceRow
		if err := json.Unmarshal(sc.Bytes(), &row); err != nil {
			return nil, fmt.Errorf("mooncake_trace line %d: %w", line, err)
		}
		if row.InputLength < 1 && len(row.HashIDs) == 0 {
			return nil, fmt.Errorf("mooncake_trace line %d: a row needs \"hash_ids\" or \"input_length\" >= 1", line)
		}
		if s := byID[row.SessionID]; s != nil && row.SessionID != "" {
			s.rows = append(s.rows, row)
			continue
		}
		s := &traceSession{id: row.SessionID, rows: []traceRow{row}, blockSize: blockSize}
		if s.id == "" {
			s.id = fmt.Sprintf("row-%d", line)
		} else {
			byID[s.id] = s
		}
		out = append(out, s)
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("mooncake_trace: no rows")
	}
	return out, nil
}

func (s *traceSession) ID() string { return s.id }
func (s *traceSession) Turns() int { return len(s.rows) }

func (s *traceSession) Turn(k int) (int, time.Duration) {
	row := s.rows[k]
	if k == 0 && row.Timestamp != nil {
		return row.OutputLength, time.Duration(*row.Timestamp * float64(time.Millisecond))
	}
	return row.OutputLength, time.Duration(row.Delay * float64(time.Millisecond))
}

// Prompt makes row k's tokens: block i holds tokens drawn from hash id i,
// and tokens past the hash ids (input_length beyond them) are the row's own.
func (s *traceSession) Prompt(k int) []int {
	row := s.rows[k]
	n := row.InputLength
	if n == 0 {
		n = len(row.HashIDs) * s.blockSize
	}
	own := xxhash.Sum64String(fmt.Sprint(s.id, "#", k)) // blocks beyond the ids: this request's own
	out := make([]int, n)
	for b := 0; b*s.blockSize < n; b++ {
		src := own
		if b < len(row.HashIDs) {
			src = uint64(row.HashIDs[b])
		}
		fillBlock(out[b*s.blockSize:min((b+1)*s.blockSize, n)], src)
	}
	return out
}

// fillBlock writes the tokens of the block drawn from src: token ids below
// 100k (a real vocabulary's size), a function of src and the position.
func fillBlock(block []int, src uint64) {
	x := src * 0x9e3779b97f4a7c15
	for j := range block {
		x += 0xbf58476d1ce4e5b9
		y := x ^ x>>31
		block[j] = int(y % 100000)
	}
}

func (s *traceSession) Answered(int, int) []int { return nil } // a row holds its whole prompt
