package report

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/twincrypt/twincrypt/measure"
)

// parseSeeds are lines for the fast path and lines it must leave to
// encoding/json.
var parseSeeds = []string{
	`{"ts":"2026-11-30T10:00:00.123456789Z","mount":"/mnt/v","op":"read","ino":42,"off":8192,"len":4096,"ns":100000,"crypto_ns":30000,"lower_ns":40000,"errno":0,"twin_ns":50000,"twin_crypto_ns":1,"twin_lower_ns":40000,"twin_errno":0}`,
	`{"ts":"2026-11-30T10:00:00+01:00","mount":"m","op":"lookup","path":"/a/b","ns":1,"errno":2,"twin_errno":-2}`,
	` { "op" : "read" , "ns" : -0 } `,
	`{}`,
	`{"op":"read","op":"write"}`,                // duplicate key: the last wins
	`{"op":"read","NS":5}`,                      // encoding/json matches keys case-insensitively
	`{"op":"r\u00e9ad","path":"/caf\u00e9"}`,    // escapes
	`{"op":"réad"}`,                             // non-ASCII
	`{"op":"read","ns":1e3}`,                    // float literal
	`{"op":"read","ns":1.0}`,                    // float literal
	`{"op":"read","ns":01}`,                     // leading zero
	`{"op":"read","ns":-01}`,                    // leading zero
	`{"op":"read","ns":null}`,                   // null
	`{"op":"read","ns":"5"}`,                    // string for a number
	`{"op":5}`,                                  // number for a string
	`{"op":"read","ns":99999999999999999999}`,   // overflow
	`{"op":"read","ino":-1}`,                    // negative uint
	`{"op":"read","extra":{"a":[1,2]}}`,         // unknown key, nested value
	`{"op":"read","ts":"yesterday"}`,            // bad time
	`{"op":"read","ts":"2026-11-30T25:00:00Z"}`, // bad hour
	`{"op":"read"} trailing`,
	`{"op":"read",}`,
	`{"op":"read"`,
	`{"op" "read"}`,
	`{"op":"read"}}`,
	`["op","read"]`,
	`{"op":"read","ns":-}`,
	"{\"op\":\"re\tad\"}", // control character in a string
	`{"op":"read","len":` + strings.Repeat("9", 30) + `}`,
}

// The fast path, where it answers, answers exactly what encoding/json
// answers; where it does not, parseLine is encoding/json.
func checkParse(t *testing.T, line string) {
	var slow measure.LogLine
	slowErr := json.Unmarshal([]byte(line), &slow)

	var fast measure.LogLine
	if fastParse([]byte(line), &fast) {
		if slowErr != nil {
			t.Fatalf("%q: fast path accepted what encoding/json rejects (%v): %+v", line, slowErr, fast)
		}
		if !reflect.DeepEqual(fast, slow) {
			t.Fatalf("%q: fast path %+v, encoding/json %+v", line, fast, slow)
		}
	}
	var got measure.LogLine
	err := parseLine([]byte(line), &got)
	if (err == nil) != (slowErr == nil) {
		t.Fatalf("%q: parseLine err %v, encoding/json err %v", line, err, slowErr)
	}
	if err == nil && !reflect.DeepEqual(got, slow) {
		t.Fatalf("%q: parseLine %+v, encoding/json %+v", line, got, slow)
	}
}

func TestParseLineMatchesEncodingJSON(t *testing.T) {
	fastCount := 0
	for _, s := range parseSeeds {
		checkParse(t, s)
		var l measure.LogLine
		if fastParse([]byte(s), &l) {
			fastCount++
		}
	}
	// The lines OpLog writes do take the fast path.
	if fastCount < 5 {
		t.Errorf("only %d seeds took the fast path", fastCount)
	}
	var l measure.LogLine
	if !fastParse(encodeLog(t, mirrorLog()[:1]), &l) || l.Op != "read" || l.TwinNs != 50*us {
		t.Errorf("an encoding/json line missed the fast path: %+v", l)
	}
}

func FuzzParseLine(f *testing.F) {
	for _, s := range parseSeeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, line string) { checkParse(t, line) })
}
