package bench

import (
	"context"
	"errors"
	"path/filepath"
	"time"

	"github.com/twincrypt/twincrypt/measure"
)

// ext4Image is an ext4 filesystem in an image file, attached to a loop
// device and mounted only while a run needs it: unmounting and detaching
// after each run empties ext4's caches, so every run starts cold.
type ext4Image struct {
	image string
	mnt   string
	dev   string
}

// create makes the sparse image and the filesystem (extra: mkfs flags).
func (v *ext4Image) create(ctx context.Context, work string, size int64, extra ...string) error {
	v.image, v.mnt = filepath.Join(work, "ext4.img"), filepath.Join(work, "mnt")
	if err := mkdirs(v.mnt); err != nil {
		return err
	}
	if err := sparseFile(v.image, size); err != nil {
		return err
	}
	dev, err := loopAttach(ctx, v.image)
	if err != nil {
		return err
	}
	err = mkfsExt4(ctx, dev, extra...)
	return errors.Join(err, loopDetach(dev))
}

func (v *ext4Image) mount(ctx context.Context) error {
	dev, err := loopAttach(ctx, v.image)
	if err != nil {
		return err
	}
	v.dev = dev
	if err := mountExt4(dev, v.mnt); err != nil {
		return errors.Join(err, v.unmount())
	}
	return nil
}

func (v *ext4Image) unmount() error {
	var errs []error
	if v.mnt != "" {
		errs = append(errs, unmount(v.mnt))
	}
	errs = append(errs, loopDetach(v.dev))
	v.dev = ""
	return errors.Join(errs...)
}

// ext4loop is ext4 on a loop device over an image on the lower
// filesystem: the control for dm-crypt, which puts the same ext4 on the
// same kind of image with encryption in between.
type ext4loop struct {
	size int64
	v    ext4Image
}

// NewExt4Loop returns the ext4-on-a-loop-device target.
func NewExt4Loop(o TargetOptions) Target { return &ext4loop{size: imageSize(o.Size)} }

func (t *ext4loop) Name() string     { return "ext4loop" }
func (t *ext4loop) Available() error { return needLoop("ext4 on a loop device") }

func (t *ext4loop) Setup(ctx context.Context, work string) error {
	return t.v.create(ctx, work, t.size)
}

func (t *ext4loop) Mount(ctx context.Context) (string, error) { return t.v.mnt, t.v.mount(ctx) }
func (t *ext4loop) Unmount(ctx context.Context) error         { return t.v.unmount() }
func (t *ext4loop) Cleanup() error                            { return t.v.unmount() }
func (t *ext4loop) DaemonCPU() time.Duration                  { return 0 }
func (t *ext4loop) Stats() *measure.Snapshot                  { return nil }
