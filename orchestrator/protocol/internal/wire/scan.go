package wire

import (
	"bytes"
	"encoding/json"
	"unicode/utf8"
	"unsafe"
)

// The scanners below validate as they go, as json.Valid does (the fuzz
// test holds them to it): each returns the index just past what it
// scanned, or -1 where b is not valid JSON.

// maxDepth is encoding/json's nesting limit: json.Valid rejects input
// with more containers open at once.
const maxDepth = 10000

// skipSpace returns the index of the first non-space byte at or after i.
func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// scanObject scans b, which must be one JSON object and nothing else but
// space, and appends its members to ms in input order, duplicates
// included; ok is false if b is not a valid object.
func scanObject(b []byte, ms []member) (_ []member, ok bool) {
	i := skipSpace(b, 0)
	if i == len(b) || b[i] != '{' {
		return ms, false
	}
	if i = skipSpace(b, i+1); i < len(b) && b[i] == '}' {
		return ms, skipSpace(b, i+1) == len(b)
	}
	for {
		if i == len(b) || b[i] != '"' {
			return ms, false
		}
		end := scanString(b, i)
		if end < 0 {
			return ms, false
		}
		key := keyOf(b[i:end])
		if i = skipColon(b, end); i < 0 {
			return ms, false
		}
		if end = scanValue(b, i, 1); end < 0 {
			return ms, false
		}
		ms = append(ms, member{key: key, value: b[i:end:end]})
		if i = skipSpace(b, end); i == len(b) {
			return ms, false
		}
		switch b[i] {
		case ',':
			i = skipSpace(b, i+1)
		case '}':
			return ms, skipSpace(b, i+1) == len(b)
		default:
			return ms, false
		}
	}
}

// keyOf returns the key that lit, a valid string literal, spells. Without
// escapes and in valid UTF-8 it is a string over lit's bytes, which must
// not change while it is in use (see DecodeObjectNoCopy); otherwise it is
// unescaped as encoding/json does, invalid UTF-8 becoming U+FFFD.
func keyOf(lit []byte) string {
	s := lit[1 : len(lit)-1]
	if bytes.IndexByte(s, '\\') < 0 && utf8.Valid(s) {
		return unsafe.String(unsafe.SliceData(s), len(s))
	}
	var k string
	_ = json.Unmarshal(lit, &k) // cannot fail: scanString accepted lit
	return k
}

// skipColon skips the space, colon and space after an object key ending
// at b[i].
func skipColon(b []byte, i int) int {
	if i = skipSpace(b, i); i == len(b) || b[i] != ':' {
		return -1
	}
	return skipSpace(b, i+1)
}

// scanValue scans the value at b[i], which is inside depth open
// containers. It loops rather than recursing, keeping whether each
// container it opened is an object on a stack of its own.
func scanValue(b []byte, i, depth int) int {
	var buf [32]bool
	objects := buf[:0] // per container open in the value: is it an object
	for {
		if i == len(b) {
			return -1
		}
		switch c := b[i]; c {
		case '{', '[':
			if depth+len(objects) == maxDepth {
				return -1
			}
			objects = append(objects, c == '{')
			if i = skipSpace(b, i+1); i < len(b) && b[i] == c+2 { // '}' and ']' are '{' and '[' plus 2
				objects = objects[:len(objects)-1]
				i++
				break
			}
			if c == '{' {
				i = scanMemberKey(b, i)
			}
			if i < 0 {
				return -1
			}
			continue // the first element
		case '"':
			i = scanString(b, i)
		case 't':
			i = scanLiteral(b, i, "true")
		case 'f':
			i = scanLiteral(b, i, "false")
		case 'n':
			i = scanLiteral(b, i, "null")
		default:
			i = scanNumber(b, i)
		}
		if i < 0 {
			return -1
		}
		// A value ended: close containers until one has a next element.
		for next := false; !next; {
			if len(objects) == 0 {
				return i
			}
			if i = skipSpace(b, i); i == len(b) {
				return -1
			}
			object := objects[len(objects)-1]
			switch {
			case b[i] == ',':
				i, next = skipSpace(b, i+1), true
				if object {
					if i = scanMemberKey(b, i); i < 0 {
						return -1
					}
				}
			case object && b[i] == '}', !object && b[i] == ']':
				objects = objects[:len(objects)-1]
				i++
			default:
				return -1
			}
		}
	}
}

// scanMemberKey scans a key at b[i] and the colon after it, and returns
// the index of the member's value.
func scanMemberKey(b []byte, i int) int {
	if i == len(b) || b[i] != '"' {
		return -1
	}
	if i = scanString(b, i); i < 0 {
		return -1
	}
	return skipColon(b, i)
}

// inString marks the bytes a string literal holds as they are: all but
// control characters, the quote and the backslash. Like json.Valid,
// scanString does not check UTF-8.
var inString = func() (t [256]bool) {
	for c := 0x20; c < len(t); c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

// scanString scans the string literal at b[i]=='"'.
func scanString(b []byte, i int) int {
	for i++; i < len(b); {
		if inString[b[i]] {
			i++
			continue
		}
		switch b[i] {
		case '"':
			return i + 1
		case '\\':
			if i+1 == len(b) {
				return -1
			}
			switch b[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				if len(b)-i < 6 {
					return -1
				}
				for _, h := range b[i+2 : i+6] {
					if !('0' <= h && h <= '9' || 'a' <= h && h <= 'f' || 'A' <= h && h <= 'F') {
						return -1
					}
				}
				i += 6
			default:
				return -1
			}
		default: // a control character
			return -1
		}
	}
	return -1
}

// scanNumber scans the number at b[i]: -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?
func scanNumber(b []byte, i int) int {
	if i < len(b) && b[i] == '-' {
		i++
	}
	switch {
	case i == len(b):
		return -1
	case b[i] == '0':
		i++
	case '1' <= b[i] && b[i] <= '9':
		i = skipDigits(b, i+1)
	default:
		return -1
	}
	if i < len(b) && b[i] == '.' {
		if i = skipDigits(b, i+1); b[i-1] == '.' {
			return -1
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		start := i
		if i = skipDigits(b, i); i == start {
			return -1
		}
	}
	return i
}

// skipDigits returns the index of the first byte at or after i that is
// not a decimal digit.
func skipDigits(b []byte, i int) int {
	for i < len(b) && '0' <= b[i] && b[i] <= '9' {
		i++
	}
	return i
}

// scanLiteral scans lit (true, false or null) at b[i].
func scanLiteral(b []byte, i int, lit string) int {
	if len(b)-i < len(lit) || string(b[i:i+len(lit)]) != lit {
		return -1
	}
	return i + len(lit)
}

// ValidObject reports whether raw is one valid JSON object: json.Valid
// accepts it and it is an object.
func ValidObject(raw json.RawMessage) bool {
	i := skipSpace(raw, 0)
	if i == len(raw) || raw[i] != '{' {
		return false
	}
	end := scanValue(raw, i, 0)
	return end >= 0 && skipSpace(raw, end) == len(raw)
}
