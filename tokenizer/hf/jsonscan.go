package hf

import (
	"errors"
	"fmt"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
)

// A tokenizer.json is mostly model.vocab and model.merges (Gemma 3's: 33
// MB, 262k tokens, 515k merges). Building a generic tree of them took over
// a second, so they are cut out of the document and read by this scanner
// straight into the model's tables; the rest is parsed as usual.

// jscan reads JSON from data at i.
type jscan struct {
	data []byte
	i    int
}

var errJSON = errors.New("malformed JSON")

func (s *jscan) ws() {
	for s.i < len(s.data) {
		switch s.data[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

// peek returns the next non-space byte, 0 at the end.
func (s *jscan) peek() byte {
	s.ws()
	if s.i >= len(s.data) {
		return 0
	}
	return s.data[s.i]
}

func (s *jscan) expect(c byte) error {
	if s.peek() != c {
		return fmt.Errorf("%w: want %q at offset %d", errJSON, c, s.i)
	}
	s.i++
	return nil
}

// str reads a string.
func (s *jscan) str() (string, error) {
	if err := s.expect('"'); err != nil {
		return "", err
	}
	start := s.i
	for s.i < len(s.data) && s.data[s.i] != '"' && s.data[s.i] != '\\' {
		s.i++
	}
	if s.i < len(s.data) && s.data[s.i] == '"' {
		s.i++
		return string(s.data[start : s.i-1]), nil
	}
	b := append([]byte(nil), s.data[start:s.i]...)
	for s.i < len(s.data) {
		c := s.data[s.i]
		s.i++
		switch c {
		case '"':
			return string(b), nil
		case '\\':
			if s.i >= len(s.data) {
				return "", errJSON
			}
			e := s.data[s.i]
			s.i++
			switch e {
			case '"', '\\', '/':
				b = append(b, e)
			case 'b':
				b = append(b, '\b')
			case 'f':
				b = append(b, '\f')
			case 'n':
				b = append(b, '\n')
			case 'r':
				b = append(b, '\r')
			case 't':
				b = append(b, '\t')
			case 'u':
				r, ok := s.hex4()
				if !ok {
					return "", errJSON
				}
				if utf16.IsSurrogate(r) && s.i+1 < len(s.data) && s.data[s.i] == '\\' && s.data[s.i+1] == 'u' {
					s.i += 2
					r2, ok := s.hex4()
					if !ok {
						return "", errJSON
					}
					r = utf16.DecodeRune(r, r2)
				}
				b = utf8.AppendRune(b, r)
			default:
				return "", errJSON
			}
		default:
			b = append(b, c)
		}
	}
	return "", errJSON
}

func (s *jscan) hex4() (rune, bool) {
	if s.i+4 > len(s.data) {
		return 0, false
	}
	v, err := strconv.ParseUint(string(s.data[s.i:s.i+4]), 16, 16)
	s.i += 4
	return rune(v), err == nil
}

// int reads a non-negative integer below 2^31.
func (s *jscan) int() (int, error) {
	s.ws()
	start := s.i
	for s.i < len(s.data) && '0' <= s.data[s.i] && s.data[s.i] <= '9' {
		s.i++
	}
	v, err := strconv.Atoi(string(s.data[start:s.i]))
	if err != nil || v >= 1<<31 {
		return 0, fmt.Errorf("%w: not an id at offset %d", errJSON, start)
	}
	return v, nil
}

// skip skips one value.
func (s *jscan) skip() error {
	switch c := s.peek(); c {
	case '"':
		_, err := s.str()
		return err
	case '{', '[':
		s.i++
		end := byte('}')
		if c == '[' {
			end = ']'
		}
		if s.peek() == end {
			s.i++
			return nil
		}
		for {
			if c == '{' {
				if _, err := s.str(); err != nil {
					return err
				}
				if err := s.expect(':'); err != nil {
					return err
				}
			}
			if err := s.skip(); err != nil {
				return err
			}
			switch s.peek() {
			case ',':
				s.i++
			case end:
				s.i++
				return nil
			default:
				return fmt.Errorf("%w at offset %d", errJSON, s.i)
			}
		}
	default:
		start := s.i
		for s.i < len(s.data) && (s.data[s.i] == '-' || s.data[s.i] == '+' || s.data[s.i] == '.' ||
			'0' <= s.data[s.i] && s.data[s.i] <= '9' || 'a' <= s.data[s.i] && s.data[s.i] <= 'z' || s.data[s.i] == 'E') {
			s.i++
		}
		if s.i == start {
			return fmt.Errorf("%w at offset %d", errJSON, s.i)
		}
		return nil
	}
}

// members calls f for each member of the object at s.i, f reading the
// value.
func (s *jscan) members(f func(key string) error) error {
	if err := s.expect('{'); err != nil {
		return err
	}
	if s.peek() == '}' {
		s.i++
		return nil
	}
	for {
		k, err := s.str()
		if err != nil {
			return err
		}
		if err := s.expect(':'); err != nil {
			return err
		}
		if err := f(k); err != nil {
			return err
		}
		switch s.peek() {
		case ',':
			s.i++
		case '}':
			s.i++
			return nil
		default:
			return fmt.Errorf("%w at offset %d", errJSON, s.i)
		}
	}
}

// elements calls f for each element of the array at s.i, f reading it.
func (s *jscan) elements(f func(i int) error) error {
	if err := s.expect('['); err != nil {
		return err
	}
	if s.peek() == ']' {
		s.i++
		return nil
	}
	for i := 0; ; i++ {
		if err := f(i); err != nil {
			return err
		}
		switch s.peek() {
		case ',':
			s.i++
		case ']':
			s.i++
			return nil
		default:
			return fmt.Errorf("%w at offset %d", errJSON, s.i)
		}
	}
}

// bigMembers is what cutModelTables cut out of a tokenizer.json.
type bigMembers struct {
	vocab      map[string]int32 // nil if absent
	merges     [][2]string
	haveMerges bool
}

// cutModelTables reads model.vocab and model.merges out of data and
// returns data with both replaced by null.
func cutModelTables(data []byte) ([]byte, *bigMembers, error) {
	s := &jscan{data: data}
	big := &bigMembers{}
	var spans [][2]int
	err := s.members(func(key string) error {
		if key != "model" || s.peek() != '{' {
			return s.skip()
		}
		return s.members(func(key string) error {
			start := s.i
			var err error
			switch key {
			case "vocab":
				big.vocab, err = s.vocab()
			case "merges":
				big.merges, err = s.merges()
				big.haveMerges = true
			default:
				return s.skip()
			}
			if err != nil {
				return fmt.Errorf("model.%s: %w", key, err)
			}
			spans = append(spans, [2]int{start, s.i})
			return nil
		})
	})
	if err != nil {
		return nil, nil, err
	}
	rest := make([]byte, 0, len(data)/8)
	done := 0
	for _, sp := range spans {
		rest = append(rest, data[done:sp[0]]...)
		rest = append(rest, "null"...)
		done = sp[1]
	}
	rest = append(rest, data[done:]...)
	return rest, big, nil
}

// vocab reads the vocabulary object; a repeated key keeps its last id, as
// in Rust.
func (s *jscan) vocab() (map[string]int32, error) {
	vocab := make(map[string]int32, len(s.data)/40)
	err := s.members(func(key string) error {
		id, err := s.int()
		if err != nil {
			return fmt.Errorf("%q: %w", key, err)
		}
		vocab[key] = int32(id)
		return nil
	})
	return vocab, err
}

// merges reads merges as "a b" strings or [a, b] pairs; strings starting
// with "#version" are skipped, as convert_merges_to_hashmap does.
func (s *jscan) merges() ([][2]string, error) {
	var out [][2]string
	err := s.elements(func(i int) error {
		switch s.peek() {
		case '"':
			m, err := s.str()
			if err != nil {
				return err
			}
			if len(m) >= 8 && m[:8] == "#version" {
				return nil
			}
			for k := 0; k < len(m); k++ {
				if m[k] == ' ' {
					for j := k + 1; j < len(m); j++ {
						if m[j] == ' ' {
							return fmt.Errorf("[%d]: %q is not two tokens separated by a space", i, m)
						}
					}
					out = append(out, [2]string{m[:k], m[k+1:]})
					return nil
				}
			}
			return fmt.Errorf("[%d]: %q is not two tokens separated by a space", i, m)
		case '[':
			var pair [2]string
			n := 0
			err := s.elements(func(j int) error {
				if j >= 2 {
					return fmt.Errorf("[%d]: not a pair", i)
				}
				var err error
				pair[j], err = s.str()
				n++
				return err
			})
			if err == nil && n != 2 {
				err = fmt.Errorf("[%d]: not a pair", i)
			}
			out = append(out, pair)
			return err
		}
		return fmt.Errorf("[%d]: not a merge", i)
	})
	return out, err
}
