package loadgen

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"strings"
	"time"
)

// fileRow is one JSONL line of an aiperf dataset, or one turn of a
// multi_turn line. Fields a format does not use are ignored, as aiperf
// ignores them.
type fileRow struct {
	SessionID    json.RawMessage `json:"session_id"`
	Turns        []fileRow       `json:"turns"`
	Text         *string         `json:"text"`
	TextInput    *string         `json:"text_input"`
	Texts        json.RawMessage `json:"texts"`
	Role         string          `json:"role"`
	Delay        *float64        `json:"delay"`
	Timestamp    *float64        `json:"timestamp"`
	MaxTokens    *int            `json:"max_tokens"`
	OutputLength *int            `json:"output_length"`
	InputLength  *int            `json:"input_length"`
	HashIDs      []int64         `json:"hash_ids"`
}

// LoadInputFile reads an aiperf JSONL dataset of the given type:
//
//   - multi_turn: one session per line, {"session_id", "turns": [{"text" |
//     "texts" | "input_length", "delay", "timestamp", "max_tokens" |
//     "output_length", "role"}]};
//   - single_turn: one turn per line with the same fields; lines sharing a
//     session_id are the turns of one session, in file order;
//   - mooncake_trace: one request per line, {"timestamp", "input_length",
//     "output_length", "hash_ids", "session_id", "delay"}; each hash id is
//     blockSize tokens of corpus text, equal ids giving equal text; lines
//     sharing a session_id are turns of one stateless session (each line is
//     a whole prompt).
//
// Times (delay, timestamp) are milliseconds. Text missing from a line is cut
// from the corpus (input_length tokens), reproducibly for a given seed.
// Errors name the file and line.
func LoadInputFile(path, typ string, corpus *Corpus, blockSize int, seed uint64) ([]*Session, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	l := &loader{typ: typ, corpus: corpus, blockSize: blockSize, seed: seed,
		rng: rand.New(rand.NewPCG(seed, 3)), bySession: map[string]*Session{}, blocks: map[int64][]int{}}
	if err := l.read(f); err != nil {
		return nil, fmt.Errorf("%s:%w", path, err)
	}
	if len(l.sessions) == 0 {
		return nil, fmt.Errorf("%s: no sessions", path)
	}
	return l.sessions, nil
}

type loader struct {
	typ       string
	corpus    *Corpus
	blockSize int
	seed      uint64
	rng       *rand.Rand
	sessions  []*Session
	bySession map[string]*Session
	blocks    map[int64][]int // mooncake hash id -> its block's tokens
}

func (l *loader) read(r io.Reader) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 1<<20), 256<<20)
	for line := 1; sc.Scan(); line++ {
		b := bytes.TrimSpace(sc.Bytes())
		if len(b) == 0 {
			continue
		}
		var row fileRow
		if err := json.Unmarshal(b, &row); err != nil {
			return fmt.Errorf("%d: %w", line, err)
		}
		if err := l.add(&row, line); err != nil {
			return fmt.Errorf("%d: %w", line, err)
		}
	}
	return sc.Err()
}

func (l *loader) add(row *fileRow, line int) error {
	switch l.typ {
	case DatasetMultiTurn:
		if len(row.Turns) == 0 {
			return errors.New(`multi_turn: "turns" is missing or empty`)
		}
		s := &Session{ID: sessionKey(row.SessionID, line)}
		for i := range row.Turns {
			if err := l.addTurn(s, &row.Turns[i]); err != nil {
				return fmt.Errorf("turns[%d]: %w", i, err)
			}
		}
		if len(s.Turns) == 0 {
			return errors.New("multi_turn: a session needs at least one user turn")
		}
		l.sessions = append(l.sessions, s)
		return nil
	case DatasetSingleTurn:
		return l.addTurn(l.session(row.SessionID, line, false), row)
	case DatasetMooncake:
		return l.addMooncake(row, line)
	}
	return fmt.Errorf("unknown dataset type %q", l.typ)
}

// session returns the session a row belongs to: the one of its session_id,
// or a new one when it has none.
func (l *loader) session(raw json.RawMessage, line int, stateless bool) *Session {
	id := sessionKey(raw, line)
	if len(raw) > 0 {
		if s, ok := l.bySession[id]; ok {
			return s
		}
	}
	s := &Session{ID: id, Stateless: stateless}
	l.bySession[id] = s
	l.sessions = append(l.sessions, s)
	return s
}

func (l *loader) addTurn(s *Session, row *fileRow) error {
	text, err := rowText(row)
	if err != nil {
		return err
	}
	if text == nil {
		if row.InputLength == nil || *row.InputLength < 1 {
			return errors.New(`a turn needs "text", "texts" or "input_length" >= 1`)
		}
		t := l.corpus.Text(l.rng, *row.InputLength)
		text = &t
	}
	switch row.Role {
	case "", "user":
	case "system":
		if len(s.Turns) > 0 || s.System != "" {
			return errors.New(`role "system" is only allowed before the first user turn`)
		}
		s.System = *text
		return nil
	default:
		return fmt.Errorf("unsupported role %q (valid: user, system)", row.Role)
	}
	t, err := rowTurn(row, len(s.Turns) == 0)
	if err != nil {
		return err
	}
	t.Text = *text
	s.Turns = append(s.Turns, t)
	return nil
}

func (l *loader) addMooncake(row *fileRow, line int) error {
	t, err := rowTurn(row, false)
	if err != nil {
		return err
	}
	switch {
	case row.TextInput != nil:
		t.Text = *row.TextInput
	case len(row.HashIDs) > 0:
		n := len(row.HashIDs) * l.blockSize
		if row.InputLength != nil {
			n = *row.InputLength
		}
		if n < 1 {
			return errors.New(`"input_length" must be >= 1`)
		}
		t.Text = l.corpus.Decode(l.hashTokens(row.HashIDs, n))
	case row.InputLength != nil && *row.InputLength >= 1:
		t.Text = l.corpus.Text(l.rng, *row.InputLength)
	default:
		return errors.New(`mooncake_trace: a row needs "hash_ids", "input_length" >= 1 or "text_input"`)
	}
	s := l.session(row.SessionID, line, true)
	if len(s.Turns) == 0 {
		t.Delay = 0
	}
	s.Turns = append(s.Turns, t)
	return nil
}

// hashTokens builds a prompt of n tokens from hash ids: block i is the
// tokens of id i, so equal ids give equal text; a prompt longer than its
// blocks is completed with fresh corpus text.
func (l *loader) hashTokens(ids []int64, n int) []int {
	out := make([]int, 0, n)
	for _, id := range ids {
		if len(out) >= n {
			break
		}
		b := l.block(id)
		out = append(out, b[:min(len(b), n-len(out))]...)
	}
	if len(out) < n {
		out = append(out, l.corpus.Tokens(l.rng.IntN(l.corpus.Len()), n-len(out))...)
	}
	return out
}

func (l *loader) block(id int64) []int {
	if b, ok := l.blocks[id]; ok {
		return b
	}
	// The block's corpus offset depends on the seed and the id only.
	offset := rand.New(rand.NewPCG(l.seed, uint64(id))).IntN(l.corpus.Len())
	b := l.corpus.Tokens(offset, l.blockSize)
	l.blocks[id] = b
	return b
}

// rowText returns the text of a row (text, or texts joined by newlines),
// nil when it has none.
func rowText(row *fileRow) (*string, error) {
	if row.Text != nil {
		return row.Text, nil
	}
	if len(row.Texts) == 0 || string(row.Texts) == "null" {
		return nil, nil
	}
	var plain []string
	if err := json.Unmarshal(row.Texts, &plain); err == nil {
		s := strings.Join(plain, "\n")
		return &s, nil
	}
	var named []struct {
		Contents []string `json:"contents"`
	}
	if err := json.Unmarshal(row.Texts, &named); err != nil {
		return nil, errors.New(`"texts" must be a list of strings or of {"name", "contents"} objects`)
	}
	var parts []string
	for _, n := range named {
		parts = append(parts, n.Contents...)
	}
	s := strings.Join(parts, "\n")
	return &s, nil
}

// rowTurn reads a row's timing and output length.
func rowTurn(row *fileRow, first bool) (Turn, error) {
	var t Turn
	if row.Delay != nil {
		if *row.Delay < 0 {
			return t, errors.New(`"delay" must be >= 0`)
		}
		if !first {
			t.Delay = msDuration(*row.Delay)
		}
	}
	if row.Timestamp != nil {
		if *row.Timestamp < 0 {
			return t, errors.New(`"timestamp" must be >= 0`)
		}
		t.Timestamp, t.HasTimestamp = msDuration(*row.Timestamp), true
	}
	out := row.MaxTokens
	if out == nil {
		out = row.OutputLength
	}
	if out != nil {
		if *out < 1 {
			return t, errors.New(`"output_length"/"max_tokens" must be >= 1`)
		}
		t.MaxTokens = *out
	}
	return t, nil
}

func msDuration(ms float64) time.Duration { return time.Duration(ms * float64(time.Millisecond)) }

// sessionKey returns a session_id as a string (numbers as written), or a
// name made from the line number when there is none.
func sessionKey(raw json.RawMessage, line int) string {
	if len(raw) == 0 || string(raw) == "null" {
		return fmt.Sprintf("line-%d", line)
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	return string(raw)
}
