package replay

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"time"

	"github.com/duet-serve/duet/tests/loadgen"
)

// ProfileExport is the dataset type of a finished duet bench run (or an
// aiperf run): its artifact directory, replayed as it was sent.
const ProfileExport = "profile_export"

// ProfileSessions reads a run's artifact directory: the sessions and their
// turns from inputs.json (each payload's system message and last user
// message, and its output limit), and when each turn was sent from
// profile_export.jsonl (a session's first turn at its start time, each
// later turn after the one before ended plus the gap the run had). Turns of
// the profiling phase only.
func ProfileSessions(dir string) ([]*loadgen.Session, error) {
	sessions, err := readInputs(filepath.Join(dir, "inputs.json"))
	if err != nil {
		return nil, err
	}
	times, err := readTimes(filepath.Join(dir, "profile_export.jsonl"))
	if err != nil {
		return nil, err
	}
	var first time.Time
	for _, t := range times {
		if first.IsZero() || t.start.Before(first) {
			first = t.start
		}
	}
	for _, s := range sessions {
		for k := range s.Turns {
			t, ok := times[turnKey{s.ID, k}]
			if !ok {
				continue
			}
			if k == 0 {
				s.Turns[k].Timestamp, s.Turns[k].HasTimestamp = t.start.Sub(first), true
			} else if prev, ok := times[turnKey{s.ID, k - 1}]; ok && t.start.After(prev.end) {
				s.Turns[k].Delay = t.start.Sub(prev.end)
			}
		}
	}
	sortByStart(sessions)
	return sessions, nil
}

type turnKey struct {
	session string
	turn    int
}

type turnTimes struct{ start, end time.Time }

// readInputs reads inputs.json: {"data": [{"session_id", "payloads": [chat
// or completions bodies]}]}.
func readInputs(path string) ([]*loadgen.Session, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var doc struct {
		Data []struct {
			SessionID string `json:"session_id"`
			Payloads  []struct {
				Messages []struct {
					Role    string `json:"role"`
					Content string `json:"content"`
				} `json:"messages"`
				Prompt              string `json:"prompt"`
				MaxTokens           int    `json:"max_tokens"`
				MaxCompletionTokens int    `json:"max_completion_tokens"`
			} `json:"payloads"`
		} `json:"data"`
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	var out []*loadgen.Session
	for i, d := range doc.Data {
		s := &loadgen.Session{ID: d.SessionID}
		for k, p := range d.Payloads {
			turn := loadgen.Turn{Text: p.Prompt, MaxTokens: max(p.MaxCompletionTokens, p.MaxTokens)}
			if n := len(p.Messages); n > 0 {
				turn.Text = p.Messages[n-1].Content
				if k == 0 && p.Messages[0].Role == "system" {
					s.System = p.Messages[0].Content
				}
			}
			s.Turns = append(s.Turns, turn)
		}
		if len(s.Turns) == 0 {
			return nil, fmt.Errorf("%s: data[%d]: a session without payloads", path, i)
		}
		out = append(out, s)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: no sessions", path)
	}
	return out, nil
}

// readTimes reads each profiled request's start and end from a
// profile_export.jsonl.
func readTimes(path string) (map[turnKey]turnTimes, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	out := map[turnKey]turnTimes{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 1<<20), 64<<20)
	for line := 1; sc.Scan(); line++ {
		var rec struct {
			Metadata struct {
				ConversationID string `json:"conversation_id"`
				TurnIndex      int    `json:"turn_index"`
				Start          int64  `json:"request_start_ns"`
				End            int64  `json:"request_end_ns"`
				Phase          string `json:"benchmark_phase"`
			} `json:"metadata"`
		}
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
			return nil, fmt.Errorf("%s:%d: %w", path, line, err)
		}
		m := rec.Metadata
		if m.Phase != "" && m.Phase != loadgen.PhaseProfiling {
			continue
		}
		out[turnKey{m.ConversationID, m.TurnIndex}] = turnTimes{time.Unix(0, m.Start), time.Unix(0, m.End)}
	}
	return out, sc.Err()
}

// sortByStart orders sessions by their first turn's timestamp.
func sortByStart(ss []*loadgen.Session) {
	sort.SliceStable(ss, func(i, j int) bool { return ss[i].Turns[0].Timestamp < ss[j].Turns[0].Timestamp })
}
