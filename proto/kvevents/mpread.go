package kvevents

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	"github.com/vmihailenco/msgpack/v5/msgpcode"
)

// maxDepth bounds nesting when skipping values we do not interpret (an
// unknown field, extra_keys); deeper input is malformed.
const maxDepth = 32

// errTruncated is returned when the payload ends inside a value.
var errTruncated = errors.New("truncated msgpack")

// mpReader reads msgpack values from a byte slice. It never panics and never
// allocates from a declared length without first checking that the input
// holds at least that many bytes. Not goroutine-safe.
type mpReader struct {
	b   []byte
	off int
}

func (r *mpReader) remaining() int { return len(r.b) - r.off }

func (r *mpReader) peek() (byte, error) {
	if r.off >= len(r.b) {
		return 0, errTruncated
	}
	return r.b[r.off], nil
}

func (r *mpReader) byte1() (byte, error) {
	c, err := r.peek()
	if err == nil {
		r.off++
	}
	return c, err
}

func (r *mpReader) take(n int) ([]byte, error) {
	if n < 0 || n > r.remaining() {
		return nil, errTruncated
	}
	p := r.b[r.off : r.off+n]
	r.off += n
	return p, nil
}

// uintN reads an n-byte big-endian unsigned integer (n = 1, 2, 4, 8).
func (r *mpReader) uintN(n int) (uint64, error) {
	p, err := r.take(n)
	if err != nil {
		return 0, err
	}
	switch n {
	case 1:
		return uint64(p[0]), nil
	case 2:
		return uint64(binary.BigEndian.Uint16(p)), nil
	case 4:
		return uint64(binary.BigEndian.Uint32(p)), nil
	default:
		return binary.BigEndian.Uint64(p), nil
	}
}

// tryNil consumes a nil and reports whether there was one.
func (r *mpReader) tryNil() bool {
	if c, err := r.peek(); err == nil && c == msgpcode.Nil {
		r.off++
		return true
	}
	return false
}

// length checks a declared element count against the bytes left (every
// element takes at least minElem bytes) and against limit.
func (r *mpReader) length(n uint64, minElem int, limit int, what string) (int, error) {
	if n > uint64(limit) {
		return 0, fmt.Errorf("%s: %d elements exceed the limit of %d", what, n, limit)
	}
	if n*uint64(minElem) > uint64(r.remaining()) {
		return 0, errTruncated
	}
	return int(n), nil
}

// arrayLen reads an array header.
func (r *mpReader) arrayLen(limit int, what string) (int, error) {
	c, err := r.byte1()
	if err != nil {
		return 0, err
	}
	var n uint64
	switch {
	case msgpcode.IsFixedArray(c):
		n = uint64(c & msgpcode.FixedArrayMask)
	case c == msgpcode.Array16:
		n, err = r.uintN(2)
	case c == msgpcode.Array32:
		n, err = r.uintN(4)
	default:
		r.off--
		return 0, fmt.Errorf("%s: want an array, got 0x%02x", what, c)
	}
	if err != nil {
		return 0, err
	}
	return r.length(n, 1, limit, what)
}

// mapLen reads a map header.
func (r *mpReader) mapLen(limit int, what string) (int, error) {
	c, err := r.byte1()
	if err != nil {
		return 0, err
	}
	var n uint64
	switch {
	case msgpcode.IsFixedMap(c):
		n = uint64(c & msgpcode.FixedMapMask)
	case c == msgpcode.Map16:
		n, err = r.uintN(2)
	case c == msgpcode.Map32:
		n, err = r.uintN(4)
	default:
		r.off--
		return 0, fmt.Errorf("%s: want a map, got 0x%02x", what, c)
	}
	if err != nil {
		return 0, err
	}
	return r.length(n, 2, limit, what)
}

// strBytes reads a str value and returns its bytes (aliasing the input).
func (r *mpReader) strBytes(what string) ([]byte, error) {
	c, err := r.byte1()
	if err != nil {
		return nil, err
	}
	var n uint64
	switch {
	case msgpcode.IsFixedString(c):
		n = uint64(c & msgpcode.FixedStrMask)
	case c == msgpcode.Str8:
		n, err = r.uintN(1)
	case c == msgpcode.Str16:
		n, err = r.uintN(2)
	case c == msgpcode.Str32:
		n, err = r.uintN(4)
	default:
		r.off--
		return nil, fmt.Errorf("%s: want a string, got 0x%02x", what, c)
	}
	if err != nil {
		return nil, err
	}
	if n > uint64(r.remaining()) {
		return nil, errTruncated
	}
	return r.take(int(n))
}

// optString reads a string or nil ("").
func (r *mpReader) optString(what string) (string, error) {
	if r.tryNil() {
		return "", nil
	}
	p, err := r.strBytes(what)
	return string(p), err
}

// binBytes reads a bin value and returns its bytes (aliasing the input).
func (r *mpReader) binBytes(what string) ([]byte, error) {
	c, err := r.byte1()
	if err != nil {
		return nil, err
	}
	var n uint64
	switch c {
	case msgpcode.Bin8:
		n, err = r.uintN(1)
	case msgpcode.Bin16:
		n, err = r.uintN(2)
	case msgpcode.Bin32:
		n, err = r.uintN(4)
	default:
		r.off--
		return nil, fmt.Errorf("%s: want bytes, got 0x%02x", what, c)
	}
	if err != nil {
		return nil, err
	}
	if n > uint64(r.remaining()) {
		return nil, errTruncated
	}
	return r.take(int(n))
}

// integer reads any msgpack integer as its 64-bit pattern; neg reports a
// negative value (so uint64 values >= 2^63 and negative int64 values can be
// told apart).
func (r *mpReader) integer(what string) (v uint64, neg bool, err error) {
	c, err := r.byte1()
	if err != nil {
		return 0, false, err
	}
	switch {
	case c <= msgpcode.PosFixedNumHigh:
		return uint64(c), false, nil
	case c >= msgpcode.NegFixedNumLow:
		return uint64(int64(int8(c))), true, nil
	case c == msgpcode.Uint8:
		v, err = r.uintN(1)
	case c == msgpcode.Uint16:
		v, err = r.uintN(2)
	case c == msgpcode.Uint32:
		v, err = r.uintN(4)
	case c == msgpcode.Uint64:
		v, err = r.uintN(8)
	case c == msgpcode.Int8:
		v, err = r.uintN(1)
		v = uint64(int64(int8(v)))
	case c == msgpcode.Int16:
		v, err = r.uintN(2)
		v = uint64(int64(int16(v)))
	case c == msgpcode.Int32:
		v, err = r.uintN(4)
		v = uint64(int64(int32(v)))
	case c == msgpcode.Int64:
		v, err = r.uintN(8)
	default:
		r.off--
		return 0, false, fmt.Errorf("%s: want an integer, got 0x%02x", what, c)
	}
	return v, int64(v) < 0 && c >= msgpcode.Int8 && c <= msgpcode.Int64, err
}

// int64In reads an integer that must lie in [lo, hi].
func (r *mpReader) int64In(lo, hi int64, what string) (int64, error) {
	v, neg, err := r.integer(what)
	if err != nil {
		return 0, err
	}
	if !neg && v > math.MaxInt64 {
		return 0, fmt.Errorf("%s: %d out of range", what, v)
	}
	n := int64(v)
	if n < lo || n > hi {
		return 0, fmt.Errorf("%s: %d out of range [%d, %d]", what, n, lo, hi)
	}
	return n, nil
}

// optInt64 reads an integer or nil.
func (r *mpReader) optInt64(what string) (*int64, error) {
	if r.tryNil() {
		return nil, nil
	}
	n, err := r.int64In(math.MinInt64, math.MaxInt64, what)
	if err != nil {
		return nil, err
	}
	return &n, nil
}

// float reads a float32/float64, or an integer as a float.
func (r *mpReader) float(what string) (float64, error) {
	c, err := r.peek()
	if err != nil {
		return 0, err
	}
	switch c {
	case msgpcode.Double:
		r.off++
		v, err := r.uintN(8)
		return math.Float64frombits(v), err
	case msgpcode.Float:
		r.off++
		v, err := r.uintN(4)
		return float64(math.Float32frombits(uint32(v))), err
	}
	v, neg, err := r.integer(what)
	if neg {
		return float64(int64(v)), err
	}
	return float64(v), err
}

// skip consumes one value of any type and returns its encoded bytes.
func (r *mpReader) skip(depth int) ([]byte, error) {
	start := r.off
	if err := r.skipValue(depth); err != nil {
		return nil, err
	}
	return r.b[start:r.off], nil
}

func (r *mpReader) skipValue(depth int) error {
	if depth > maxDepth {
		return fmt.Errorf("msgpack nested deeper than %d", maxDepth)
	}
	c, err := r.byte1()
	if err != nil {
		return err
	}
	var n uint64 // payload bytes to skip, or elements for containers
	elems := 0   // values per element: 1 for arrays, 2 for maps
	switch {
	case c <= msgpcode.PosFixedNumHigh, c >= msgpcode.NegFixedNumLow,
		c == msgpcode.Nil, c == msgpcode.False, c == msgpcode.True:
		return nil
	case msgpcode.IsFixedString(c):
		n = uint64(c & msgpcode.FixedStrMask)
	case msgpcode.IsFixedArray(c):
		n, elems = uint64(c&msgpcode.FixedArrayMask), 1
	case msgpcode.IsFixedMap(c):
		n, elems = uint64(c&msgpcode.FixedMapMask), 2
	case c == msgpcode.Uint8, c == msgpcode.Int8:
		n = 1
	case c == msgpcode.Uint16, c == msgpcode.Int16:
		n = 2
	case c == msgpcode.Uint32, c == msgpcode.Int32, c == msgpcode.Float:
		n = 4
	case c == msgpcode.Uint64, c == msgpcode.Int64, c == msgpcode.Double:
		n = 8
	case c == msgpcode.Str8, c == msgpcode.Bin8:
		n, err = r.uintN(1)
	case c == msgpcode.Str16, c == msgpcode.Bin16:
		n, err = r.uintN(2)
	case c == msgpcode.Str32, c == msgpcode.Bin32:
		n, err = r.uintN(4)
	case c == msgpcode.Array16:
		n, err = r.uintN(2)
		elems = 1
	case c == msgpcode.Array32:
		n, err = r.uintN(4)
		elems = 1
	case c == msgpcode.Map16:
		n, err = r.uintN(2)
		elems = 2
	case c == msgpcode.Map32:
		n, err = r.uintN(4)
		elems = 2
	case c >= msgpcode.FixExt1 && c <= msgpcode.FixExt16:
		n = 1 + (1 << (c - msgpcode.FixExt1)) // type byte + 1, 2, 4, 8 or 16 bytes
	case c == msgpcode.Ext8:
		n, err = r.uintN(1)
		n++
	case c == msgpcode.Ext16:
		n, err = r.uintN(2)
		n++
	case c == msgpcode.Ext32:
		n, err = r.uintN(4)
		n++
	default: // 0xc1, never used
		return fmt.Errorf("invalid msgpack code 0x%02x", c)
	}
	if err != nil {
		return err
	}
	if elems == 0 {
		if n > uint64(r.remaining()) {
			return errTruncated
		}
		r.off += int(n)
		return nil
	}
	total := n * uint64(elems)
	if total > uint64(r.remaining()) {
		return errTruncated
	}
	for i := uint64(0); i < total; i++ {
		if err := r.skipValue(depth + 1); err != nil {
			return err
		}
	}
	return nil
}
