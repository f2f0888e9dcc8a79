package report

import (
	"encoding/json"
	"strconv"

	"github.com/twincrypt/twincrypt/measure"
)

// parseLine decodes one op log line into l, which must be zero. It is
// encoding/json's answer, only faster: lines as OpLog writes them (a flat
// object, exact lower-case keys, integers, ASCII strings without escapes)
// are decoded by hand, several times faster than reflection; anything
// else — escapes, non-ASCII, unknown keys, nulls, floats, odd spacing —
// goes to json.Unmarshal, which has the last word on what is malformed.
// FuzzParseLine holds the two to the same answers.
func parseLine(text []byte, l *measure.LogLine) error {
	if fastParse(text, l) {
		return nil
	}
	*l = measure.LogLine{}
	return json.Unmarshal(text, l)
}

// fastParse reports whether it decoded text completely; when it returns
// false, l holds garbage.
func fastParse(b []byte, l *measure.LogLine) bool {
	i := skipSpace(b, 0)
	if i >= len(b) || b[i] != '{' {
		return false
	}
	i = skipSpace(b, i+1)
	if i < len(b) && b[i] == '}' {
		return skipSpace(b, i+1) == len(b)
	}
	for {
		key, j, ok := plainString(b, i)
		if !ok {
			return false
		}
		i = skipSpace(b, j)
		if i >= len(b) || b[i] != ':' {
			return false
		}
		i = skipSpace(b, i+1)
		if i >= len(b) {
			return false
		}
		if b[i] == '"' {
			s, j, ok := plainString(b, i)
			if !ok {
				return false
			}
			switch string(key) {
			case "ts":
				// The very code encoding/json runs for a time.Time.
				if l.TS.UnmarshalJSON(b[i:j]) != nil {
					return false
				}
			case "mount":
				l.Mount = string(s)
			case "op":
				l.Op = string(s)
			case "path":
				l.Path = string(s)
			default:
				return false
			}
			i = j
		} else {
			j := i
			if j < len(b) && b[j] == '-' {
				j++
			}
			for j < len(b) && b[j] >= '0' && b[j] <= '9' {
				j++
			}
			num := b[i:j]
			// JSON forbids leading zeros ("01"); leave that to encoding/json.
			if len(num) == 0 || num[len(num)-1] == '-' || (len(num) > 1 && num[0] == '0') ||
				(len(num) > 2 && num[0] == '-' && num[1] == '0') {
				return false
			}
			if !setNumber(l, key, num) {
				return false
			}
			i = j
		}
		i = skipSpace(b, i)
		if i >= len(b) {
			return false
		}
		switch b[i] {
		case ',':
			i = skipSpace(b, i+1)
		case '}':
			return skipSpace(b, i+1) == len(b)
		default:
			return false
		}
	}
}

// setNumber stores the integer literal num into the field named key.
func setNumber(l *measure.LogLine, key, num []byte) bool {
	var dst *int64
	switch string(key) {
	case "ino":
		v, err := strconv.ParseUint(string(num), 10, 64)
		l.Ino = v
		return err == nil
	case "errno", "twin_errno":
		// int is 64 bits wherever twincrypt runs (FUSE on 64-bit Linux).
		v, err := strconv.ParseInt(string(num), 10, strconv.IntSize)
		if key[0] == 'e' {
			l.Errno = int(v)
		} else {
			l.TwinErrno = int(v)
		}
		return err == nil
	case "off":
		dst = &l.Off
	case "len":
		dst = &l.Len
	case "ns":
		dst = &l.Ns
	case "crypto_ns":
		dst = &l.CryptoNs
	case "lower_ns":
		dst = &l.LowerNs
	case "twin_ns":
		dst = &l.TwinNs
	case "twin_crypto_ns":
		dst = &l.TwinCryptoNs
	case "twin_lower_ns":
		dst = &l.TwinLowerNs
	default:
		return false
	}
	v, err := strconv.ParseInt(string(num), 10, 64)
	*dst = v
	return err == nil
}

// plainString returns the contents of the JSON string starting at b[i]
// and the index after its closing quote, if it holds only printable ASCII
// without escapes — the strings whose decoding is the identity.
func plainString(b []byte, i int) (s []byte, next int, ok bool) {
	if i >= len(b) || b[i] != '"' {
		return nil, 0, false
	}
	for j := i + 1; j < len(b); j++ {
		switch c := b[j]; {
		case c == '"':
			return b[i+1 : j], j + 1, true
		case c == '\\' || c < 0x20 || c >= 0x80:
			return nil, 0, false
		}
	}
	return nil, 0, false
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}
