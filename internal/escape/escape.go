// Package escape renders stored bytes for error messages and log lines.
package escape

import (
	"fmt"
	"strconv"
	"unicode/utf8"
)

// maxLen bounds how many bytes of a value String prints.
const maxLen = 256

// String renders s for an error message or a log line: printable UTF-8 is
// kept, quotes, backslashes, control bytes, non-printable runes and invalid
// UTF-8 are escaped Go-style, and a value longer than 256 bytes is cut and
// its full length stated, so a hostile stored value can neither forge a log
// line nor flood one.
func String(s string) string {
	cut := len(s) > maxLen
	v := s
	if cut {
		v = s[:maxLen]
	}
	var b []byte
	for i := 0; i < len(v); {
		r, size := utf8.DecodeRuneInString(v[i:])
		switch {
		case r == utf8.RuneError && size <= 1:
			b = append(b, `\x`...)
			b = append(b, "0123456789abcdef"[v[i]>>4], "0123456789abcdef"[v[i]&0xf])
		case r == '"' || r == '\\' || !strconv.IsPrint(r):
			q := strconv.Quote(string(r))
			b = append(b, q[1:len(q)-1]...)
		default:
			b = append(b, v[i:i+size]...)
		}
		i += size
	}
	if cut {
		b = append(b, fmt.Sprintf("...(%d bytes)", len(s))...)
	}
	return string(b)
}
