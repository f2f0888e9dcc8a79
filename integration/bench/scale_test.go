package bench

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// The scale harness at a tiny count on native, the twin and crypt-xts,
// both shapes: every op runs, and every listing shows exactly the files
// created (and, on the tree, its directories), on every target; our
// daemons' memory is read; nothing stays mounted.
func TestScaleHarnessCounts(t *testing.T) {
	if testing.Short() {
		t.Skip("mounts real filesystems")
	}
	if err := needFUSE(); err != nil {
		t.Skipf("no FUSE here: %v", err)
	}
	for _, p := range []string{"ls", "find", "du", "rm"} {
		if err := needProgs(p); err != nil {
			t.Skip(err)
		}
	}
	exe := twincryptBinary(t)
	o := TargetOptions{Exe: exe, Size: SizeTiny}
	targets := []Target{NewNative(), NewTwin(o), NewCrypt(o, "aes-xts")}
	work := t.TempDir()
	t.Cleanup(func() {
		for _, tg := range targets {
			tg.Cleanup()
		}
		for _, m := range mountsUnder(work) {
			t.Errorf("left mounted: %s", m)
			syscall.Unmount(m, syscall.MNT_DETACH)
		}
	})
	const n = 200
	var log bytes.Buffer
	res, err := RunScale(context.Background(), ScaleConfig{
		Targets: targets, Counts: []int{n}, Shapes: []Shape{ShapeFlat, ShapeTree},
		Work: work, Log: &log, Machine: DetectMachine(), Command: "test",
	})
	t.Logf("log:\n%s", log.String())
	if err != nil {
		t.Fatalf("RunScale: %v", err)
	}
	if len(res.Skipped) > 0 {
		t.Fatalf("skipped: %v", res.Skipped)
	}
	seen := map[scaleKey]bool{}
	for _, s := range res.Steps {
		seen[scaleKey{s.Target, s.Shape, s.Files, s.Op}] = true
		if s.Err != "" {
			t.Errorf("%s %s %s: %s", s.Target, s.Shape, s.Op, s.Err)
		}
		if want := ScaleExpected(s.Op, s.Shape, n); s.Found != want {
			t.Errorf("%s %s %s found %d, want %d", s.Target, s.Shape, s.Op, s.Found, want)
		}
		if s.Target != "native" && (s.RSSKiB <= 0 || s.HWMKiB < s.RSSKiB) {
			t.Errorf("%s %s %s: daemon RSS %d KiB, peak %d KiB", s.Target, s.Shape, s.Op, s.RSSKiB, s.HWMKiB)
		}
	}
	for _, tg := range targets {
		for _, shape := range []Shape{ShapeFlat, ShapeTree} {
			for _, op := range ScaleOps {
				if !seen[scaleKey{tg.Name(), shape, n, op}] {
					t.Errorf("%s %s: no %s step", tg.Name(), shape, op)
				}
			}
		}
	}
	// Each run removes its work directory.
	if ents, _ := os.ReadDir(work); len(ents) != 0 {
		t.Errorf("left in the work directory: %v", ents)
	}

	out := t.TempDir()
	files, err := WriteScaleOutputs(out, res)
	if err != nil {
		t.Fatalf("WriteScaleOutputs: %v", err)
	}
	if len(files) != 10 {
		t.Errorf("wrote %v, want scale.json, scale.md and 8 charts", files)
	}
	md, _ := os.ReadFile(filepath.Join(out, ScaleMD))
	for _, want := range []string{"| ls-l | crypt-xts |", "| find | twin |", "bytes/inode", "scale-tree.svg"} {
		if !strings.Contains(string(md), want) {
			t.Errorf("scale.md lacks %q:\n%s", want, md)
		}
	}
	back, err := ReadScaleResults(filepath.Join(out, ScaleJSON))
	if err != nil || len(back.Steps) != len(res.Steps) {
		t.Errorf("scale.json read back: %d steps, %v", len(back.Steps), err)
	}
}

// A listing that shows a different number of files than were created is
// an error of that op, not a result: scaleOp checks what ls, find and du
// report against the directory it was given.
func TestScaleOpCountMismatch(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "scale")
	if err := scaleCreate(dir, ShapeTree, 50); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, op := range []string{OpLsF, OpLsL, OpFind, OpDu} {
		if got, err := scaleOp(ctx, op, dir, ShapeTree, 50); err != nil {
			t.Errorf("%s on 50 files: %d, %v", op, got, err)
		}
	}
	// One file more than the harness made: every listing must notice.
	if err := os.WriteFile(filepath.Join(dir, "d0000", "extra"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, op := range []string{OpLsF, OpLsL, OpFind, OpDu} {
		if got, err := scaleOp(ctx, op, dir, ShapeTree, 50); err == nil {
			t.Errorf("%s missed the extra file: found %d", op, got)
		}
	}
	if _, err := scaleOp(ctx, OpRm, dir, ShapeTree, 50); err != nil {
		t.Errorf("rm -rf: %v", err)
	}
}
