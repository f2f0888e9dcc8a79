package printable

import "testing"

func TestString(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"/mnt/vault", "/mnt/vault"},
		{"fs test", "fs test"},
		{"héllo wörld", "héllo wörld"},
		{"", ""},
		{"\x1b]0;owned\x07", `"\x1b]0;owned\a"`},
		{"a\x1b[2Jb", `"a\x1b[2Jb"`},
		{"line\nnext", `"line\nnext"`},
		{"tab\there", `"tab\there"`},
		{"\x9b31m", `"\x9b31m"`},     // invalid UTF-8: a raw C1 CSI byte
		{"\u009b31m", `"\u009b31m"`}, // C1 CSI as a rune
		{"bidi\u202eevil", `"bidi\u202eevil"`},
	} {
		if got := String(c.in); got != c.want {
			t.Errorf("String(%q) = %s, want %s", c.in, got, c.want)
		}
	}
}
