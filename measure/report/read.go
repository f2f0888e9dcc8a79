package report

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/twincrypt/twincrypt/measure"
)

// MaxLine is the longest line read; longer lines are skipped as malformed.
// Real lines are a few hundred bytes; a path can make one a few KiB.
const MaxLine = 1 << 20

// readBufSize is the bufio.Reader size: most lines fit in one ReadSlice.
const readBufSize = 64 << 10

// Why a line is malformed; quoted in MalformedExamples.
var (
	errNoOp        = errors.New(`no "op"`)
	errBadTS       = errors.New(`missing or implausible "ts"`)
	errNegative    = errors.New("negative duration")
	errNegativeLen = errors.New(`negative "len"`)
	errTooManyKeys = fmt.Errorf("more than %d distinct (mount, op) pairs", maxKeys)
	errTooLong     = fmt.Errorf("longer than %d bytes", MaxLine)
)

// Stdin is the file name that ReadFile takes to mean standard input.
const Stdin = "-"

// ReadFile reads the log at path (standard input for "-"), decompressing
// it if the name ends in ".gz". Malformed lines are counted and skipped;
// only failing to open or read the file is an error.
func (a *Aggregator) ReadFile(path string) error {
	if path == Stdin {
		return a.Read(os.Stdin, "stdin")
	}
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("open log: %w", err)
	}
	defer f.Close()
	var r io.Reader = f
	if strings.HasSuffix(path, ".gz") {
		zr, err := gzip.NewReader(f)
		if err != nil {
			return fmt.Errorf("read log %s: %w", path, err)
		}
		defer zr.Close()
		r = zr
	}
	return a.Read(r, path)
}

// Read reads one log from r; name identifies it in the report and in
// malformed-line examples ("name:lineno: why").
func (a *Aggregator) Read(r io.Reader, name string) error {
	a.files = append(a.files, name)
	br := bufio.NewReaderSize(r, readBufSize)
	var (
		long   []byte // a line that did not fit in br's buffer
		tooBig bool   // the current line exceeded MaxLine
		lineNo int64
		line   measure.LogLine
	)
	for {
		chunk, err := br.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			if !tooBig && len(long)+len(chunk) <= MaxLine {
				long = append(long, chunk...)
			} else {
				tooBig, long = true, long[:0]
			}
			continue
		}
		if err != nil && !errors.Is(err, io.EOF) {
			return fmt.Errorf("read log %s: %w", name, err)
		}
		if len(chunk) > 0 || len(long) > 0 || tooBig {
			lineNo++
			text := chunk
			if len(long) > 0 {
				long = append(long, chunk...)
				text = long
			}
			if tooBig || len(long) > MaxLine {
				a.addMalformed(name, lineNo, errTooLong)
			} else {
				a.addLine(text, &line, name, lineNo)
			}
			long, tooBig = long[:0], false
			// Do not let one huge line pin a megabyte for the rest of
			// the file.
			if cap(long) > readBufSize {
				long = nil
			}
		}
		if err != nil { // io.EOF; a last line without '\n' was handled above
			return nil
		}
	}
}

func (a *Aggregator) addLine(text []byte, line *measure.LogLine, name string, lineNo int64) {
	text = bytes.TrimSpace(text)
	if len(text) == 0 {
		return // blank lines carry nothing and are not counted
	}
	// Reset: omitted fields (the twin ones, path) must not keep the
	// previous line's values.
	*line = measure.LogLine{}
	if err := parseLine(text, line); err != nil {
		a.addMalformed(name, lineNo, err)
		return
	}
	if err := a.Add(line); err != nil {
		a.addMalformed(name, lineNo, err)
	}
}

func (a *Aggregator) addMalformed(name string, lineNo int64, why error) {
	a.malformed++
	if len(a.examples) < maxExamples {
		a.examples = append(a.examples, fmt.Sprintf("%s:%d: %v", name, lineNo, why))
	}
}

// WithRotated returns paths with, before each FILE, its rotated
// predecessor FILE.1 when that exists and is not listed already: an op log
// capped by OpLogOptions.MaxBytes keeps its older half there.
func WithRotated(paths []string) []string {
	out := make([]string, 0, len(paths))
	for _, p := range paths {
		rotated := p + ".1"
		if p != Stdin && !slices.Contains(paths, rotated) && !slices.Contains(out, rotated) {
			if fi, err := os.Stat(rotated); err == nil && fi.Mode().IsRegular() {
				out = append(out, rotated)
			}
		}
		out = append(out, p)
	}
	return out
}
