//go:build !(linux && amd64)

package trace

import (
	"errors"
	"io"
	"time"
)

// Options choose what a Tracer follows.
type Options struct {
	Pids         []int
	AllProcesses bool
}

// Unavailable says which piece kernel tracing lacks here.
type Unavailable struct {
	What string
	Err  error
}

func (u *Unavailable) Error() string { return "kernel tracing unavailable: " + u.What }

// Target is a traced filesystem.
type Target struct {
	Path string
	Dev  uint32
	Disk []uint32
}

// Tracer is not available on this platform.
type Tracer struct{}

var errPlatform = errors.New("kernel tracing is implemented for Linux on x86-64 only")

// New says that this platform cannot trace.
func New(Options) (*Tracer, error) {
	return nil, &Unavailable{What: "this platform (Linux on x86-64 only)"}
}

func (*Tracer) AddProcess(int) error             { return errPlatform }
func (*Tracer) AddTarget(string) (Target, error) { return Target{}, errPlatform }
func (*Tracer) Targets() []Target                { return nil }
func (*Tracer) Notes() []string                  { return nil }
func (*Tracer) Snapshot() (Snapshot, error)      { return Snapshot{}, errPlatform }
func (*Tracer) Close() error                     { return nil }

// ProgramStat is a program's runs and run time.
type ProgramStat struct {
	Runs  uint64
	Total time.Duration
}

func (*Tracer) ProgramStats() (map[string]ProgramStat, error) { return nil, errPlatform }

// EnableRunStats is not available on this platform.
func EnableRunStats() (io.Closer, error) { return nil, errPlatform }

// ProgramIDs are none on this platform.
func (*Tracer) ProgramIDs() []uint32 { return nil }
