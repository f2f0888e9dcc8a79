package measure

import (
	"strings"
	"testing"
)

// TestTableQuotesControlCharacters: a snapshot read from the stats socket
// whose mount or op name carries terminal escapes (issue #16 (4)) is
// printed with the escapes quoted, never raw.
func TestTableQuotesControlCharacters(t *testing.T) {
	s := Snapshot{Mount: "\x1b]0;owned\x07/mnt", Ops: []Stats{{Op: "read\x1b[2J", Count: 1}}}
	var b strings.Builder
	s.Table(&b)
	out := b.String()
	if strings.ContainsAny(out, "\x1b\x07") {
		t.Errorf("table carries raw control characters:\n%q", out)
	}
	if !strings.Contains(out, `"\x1b]0;owned\a/mnt"`) || !strings.Contains(out, `"read\x1b[2J"`) {
		t.Errorf("table does not show the quoted names:\n%s", out)
	}
	// Ordinary names are printed as they are.
	b.Reset()
	Snapshot{Mount: "/mnt/vault", Ops: []Stats{{Op: "read", Count: 1}}}.Table(&b)
	if !strings.HasPrefix(b.String(), "mount /mnt/vault, ") {
		t.Errorf("plain mount name changed: %q", b.String())
	}
}
