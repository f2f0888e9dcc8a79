// Package printable makes strings from untrusted places (a config's
// unauthenticated fields, op logs, the stats socket) safe to print on a
// terminal: a string with a control character or invalid UTF-8 could
// otherwise carry escape sequences that move the cursor, rewrite earlier
// lines or set the window title.
package printable

import (
	"strconv"
	"unicode"
	"unicode/utf8"
)

// String returns s unchanged when every rune of it is printable (a space
// counts), else s quoted as strconv.Quote does: in double quotes, with
// control characters, invalid bytes and other non-printables escaped.
func String(s string) string {
	if Safe(s) {
		return s
	}
	return strconv.Quote(s)
}

// Safe reports whether s is valid UTF-8 made of printable runes only.
func Safe(s string) bool {
	for _, r := range s {
		if r == utf8.RuneError || !unicode.IsPrint(r) {
			return false
		}
	}
	return true
}
