package hf

import "unicode/utf8"

// The ByteLevel alphabet (pre_tokenizers/byte_level.rs bytes_char,
// tokenizers v0.22.2, after GPT-2): printable bytes other than space and
// soft hyphen stand for themselves, the other 68 bytes for U+0100 onwards
// in byte order.
var byteToRune, runeToByte = func() ([256]rune, map[rune]byte) {
	var b2r [256]rune
	r2b := make(map[rune]byte, 256)
	n := rune(0)
	for b := range 256 {
		if '!' <= b && b <= '~' || 0xA1 <= b && b <= 0xAC || 0xAE <= b && b <= 0xFF {
			b2r[b] = rune(b)
		} else {
			b2r[b] = 256 + n
			n++
		}
		r2b[b2r[b]] = byte(b)
	}
	return b2r, r2b
}()

// fromByteLevel returns the bytes a string of the alphabet stands for;
// ok false if a character is not in it.
func fromByteLevel(s string) (string, bool) {
	b := make([]byte, 0, len(s))
	for _, r := range s {
		c, ok := runeToByte[r]
		if !ok {
			return "", false
		}
		b = append(b, c)
	}
	return string(b), true
}

// toByteLevel returns the alphabet's spelling of raw bytes.
func toByteLevel(raw string) string {
	b := make([]byte, 0, 2*len(raw))
	for i := 0; i < len(raw); i++ {
		b = utf8.AppendRune(b, byteToRune[raw[i]])
	}
	return string(b)
}
