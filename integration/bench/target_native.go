package bench

import (
	"context"
	"path/filepath"
	"time"

	"github.com/twincrypt/twincrypt/measure"
)

// native is a plain directory on the lower filesystem: the baseline every
// other target is a ratio to.
type native struct{ dir string }

// NewNative returns the plain-directory target.
func NewNative() Target { return &native{} }

func (t *native) Name() string     { return "native" }
func (t *native) Available() error { return nil }

func (t *native) Setup(ctx context.Context, work string) error {
	t.dir = filepath.Join(work, "dir")
	return mkdirs(t.dir)
}

func (t *native) Mount(ctx context.Context) (string, error) { return t.dir, nil }
func (t *native) Unmount(ctx context.Context) error         { return nil }
func (t *native) Cleanup() error                            { return nil }
func (t *native) DaemonCPU() time.Duration                  { return 0 }
func (t *native) Stats() *measure.Snapshot                  { return nil }
