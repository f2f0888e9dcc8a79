package links

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/twincrypt/twincrypt/cipher/keys"
)

func testSealer() *keys.Sealer { return keys.NewSealer(bytes.Repeat([]byte{7}, 64)) }

// TestInlineAndLong checks every target length: up to 3043 bytes inline,
// with a lower size that gives the length back and is never MarkerLen;
// above, a marker of MarkerLen bytes whose sidecar opens.
func TestInlineAndLong(t *testing.T) {
	s := testSealer()
	for n := 1; n <= MaxTarget; n++ {
		target := bytes.Repeat([]byte{'a' + byte(n%26)}, n)
		lower, ok := Seal(s, target)
		if ok != (n <= 3043) {
			t.Fatalf("%d bytes: inline %v", n, ok)
		}
		if ok {
			if len(lower) > MaxLower || len(lower) == MarkerLen || PlainLen(int64(len(lower))) != int64(n) {
				t.Fatalf("%d bytes: lower %d bytes, PlainLen %d", n, len(lower), PlainLen(int64(len(lower))))
			}
			if got, err := Open(s, []byte(lower)); err != nil || !bytes.Equal(got, target) {
				t.Fatalf("%d bytes: Open: %v", n, err)
			}
			continue
		}
		m := NewMarker(n)
		got, id, ok := ParseMarker(m)
		if len(m) != MarkerLen || !ok || got != n || !IsID(id) || PlainLen(int64(len(m))) != -1 {
			t.Fatalf("%d bytes: marker %q parses as %d, %q, %v", n, m, got, id, ok)
		}
		side := SealLong(s, m, target)
		if len(side) > MaxSidecar {
			t.Fatalf("%d bytes: sidecar of %d bytes", n, len(side))
		}
		if plain, err := OpenLong(s, m, side); err != nil || !bytes.Equal(plain, target) {
			t.Fatalf("%d bytes: OpenLong: %v", n, err)
		}
		if _, err := OpenLong(s, NewMarker(n), side); !errors.Is(err, ErrOpen) {
			t.Fatalf("%d bytes: a sidecar opened under another marker: %v", n, err)
		}
	}
}

// TestParseMarkerStrict: anything but the exact shape is not a marker.
func TestParseMarkerStrict(t *testing.T) {
	id := strings.Repeat("0a", IDLen/2)
	good := markerPrefix + "4000." + id
	if _, _, ok := ParseMarker(good); !ok {
		t.Fatalf("%q refused", good)
	}
	for _, bad := range []string{
		"",
		markerPrefix + "0000." + id, // length 0
		markerPrefix + "4096." + id, // longer than PATH_MAX-1
		markerPrefix + "40a0." + id, // not decimal
		markerPrefix + "-400." + id, // sign
		markerPrefix + "4000." + strings.ToUpper(id),       // upper-case hex
		markerPrefix + "4000." + id[:IDLen-2] + "/.",       // a path
		markerPrefix + "4000." + id[:IDLen-1],              // short
		markerPrefix + "4000." + id + "0",                  // long
		markerPrefix + "4000_" + id,                        // separator
		strings.Replace(good, "twincrypt", "twincrypT", 1), // prefix
		"x" + good[1:], // prefix
		markerPrefix + "4000." + id[:IDLen-3] + "..." + "",  // dots
		markerPrefix + "4000." + strings.Repeat("g", IDLen), // not hex
	} {
		if n, i, ok := ParseMarker(bad); ok {
			t.Errorf("%q parsed as %d, %q", bad, n, i)
		}
	}
}
