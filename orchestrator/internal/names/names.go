// Package names checks the names configuration gives things that end up
// in HTTP headers and metric labels.
package names

import "strings"

// Header reports whether s is an HTTP token (an RFC 9110 field name).
func Header(s string) bool {
	for _, r := range s {
		if r > 0x7e || r <= ' ' || strings.ContainsRune(`"(),/:;<=>?@[\]{}`, r) {
			return false
		}
	}
	return s != ""
}

// Label reports whether s is 1 to max ASCII letters, digits and runes of
// extra: a name safe in a metric label, a log field and a header value.
func Label(s string, max int, extra string) bool {
	if s == "" || len(s) > max {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune(extra, r)) {
			return false
		}
	}
	return true
}
