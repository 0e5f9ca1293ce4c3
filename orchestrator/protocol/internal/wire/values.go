package wire

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/duet-serve/duet/proto/openai"
)

// The decoders below read one value of an Object or an array that was
// scanned (so is valid JSON with no space around it). Absent and null read
// as the zero value, as encoding/json leaves a field it finds null.

// errNotArray is returned for a value that must be an array.
var errNotArray = errors.New("not an array")

// decodeString returns the string raw spells, unescaped as encoding/json
// does (invalid UTF-8 becomes U+FFFD). The result does not alias raw.
func decodeString(raw json.RawMessage) (string, error) {
	switch {
	case IsNull(raw):
		return "", nil
	case raw[0] != '"':
		return "", wrongType(raw, "a string")
	}
	var s string
	if err := openai.Unquote(raw, &s); err != nil {
		return "", err
	}
	return s, nil
}

// decodeInt returns the integer raw spells; a fraction, an exponent or a
// value out of int's range is an error, as in encoding/json.
func decodeInt(raw json.RawMessage) (int, error) {
	v, err := decodeInt64(raw)
	if err == nil && int64(int(v)) != v {
		return 0, wrongType(raw, "an int")
	}
	return int(v), err
}

// decodeInt64 is decodeInt for int64.
func decodeInt64(raw json.RawMessage) (int64, error) {
	if IsNull(raw) {
		return 0, nil
	}
	v, err := strconv.ParseInt(string(raw), 10, 64)
	if err != nil {
		return 0, wrongType(raw, "an integer")
	}
	return v, nil
}

// wrongType says that raw is not of the wanted type.
func wrongType(raw json.RawMessage, want string) error {
	return fmt.Errorf("want %s, got %s", want, truncate(raw, 40))
}

// truncate returns at most n bytes of b, marked when cut.
func truncate(b []byte, n int) string {
	if len(b) <= n {
		return string(b)
	}
	return string(b[:n]) + "..."
}

// arrayElements appends the elements of the array raw to dst, each
// without the space around it. Absent and null are an empty array; ok is
// false when raw is another value.
func arrayElements(raw json.RawMessage, dst []json.RawMessage) (_ []json.RawMessage, ok bool) {
	if IsNull(raw) {
		return dst, true
	}
	if raw[0] != '[' {
		return dst, false
	}
	i := skipSpace(raw, 1)
	if raw[i] == ']' {
		return dst, true
	}
	for {
		end := scanValue(raw, i, 1)
		if end < 0 { // cannot happen: raw was scanned
			return dst, false
		}
		dst = append(dst, raw[i:end:end])
		i = skipSpace(raw, end)
		if raw[i] == ']' {
			return dst, true
		}
		i = skipSpace(raw, i+1) // past ','
	}
}
