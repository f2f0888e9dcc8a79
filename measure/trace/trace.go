//go:build linux && amd64

// Package trace times, in the kernel, what an application waits for on a
// set of target filesystems: every filesystem system call of a workload
// (by call and target), every FUSE request (by opcode and connection:
// the kernel-side round trip) and, under a block-device target, every
// block request from issue to completion. The programs are eBPF, loaded
// with cilium/ebpf, and keep log-linear histograms in kernel maps;
// Snapshot reads them into HdrHistograms, the form measure uses.
//
// The node engine knows nothing of this: a tracer watches any mount,
// ours or a peer's, from the outside. See docs/tracing.md.
package trace

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/btf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"
)

// Options choose what a Tracer follows.
type Options struct {
	// Pids are the workload's processes (more can be added with
	// AddProcess); a child they fork is followed from its birth.
	Pids []int
	// AllProcesses times every process's system calls instead.
	AllProcesses bool
}

// Unavailable says which piece kernel tracing lacks here.
type Unavailable struct {
	What string // "bpf() not permitted", "no kernel BTF", ...
	Err  error
}

func (u *Unavailable) Error() string {
	if u.Err == nil {
		return "kernel tracing unavailable: " + u.What
	}
	return "kernel tracing unavailable: " + u.What + ": " + u.Err.Error()
}

func (u *Unavailable) Unwrap() error { return u.Err }

// Target is a traced filesystem.
type Target struct {
	Path string
	Dev  uint32   // st_dev as the kernel encodes it: major<<20 | minor
	Disk []uint32 // the request-based disks below it, for block requests
}

// Tracer owns the loaded programs and their maps. Close detaches all.
type Tracer struct {
	coll   *ebpf.Collection
	links  []link.Link
	filter bool
	notes  []string

	mu      sync.Mutex
	targets []Target
	closed  bool
}

// New loads and attaches the programs. An *Unavailable error says which
// piece is missing; Notes lists what a partial kernel leaves untraced.
func New(o Options) (*Tracer, error) {
	if _, err := os.Stat("/sys/kernel/btf/vmlinux"); err != nil {
		return nil, &Unavailable{What: "no kernel BTF (/sys/kernel/btf/vmlinux)", Err: err}
	}
	spec, err := btf.LoadKernelSpec()
	if err != nil {
		return nil, &Unavailable{What: "kernel BTF unreadable", Err: err}
	}
	off, err := loadOffsets(spec)
	if err != nil {
		return nil, &Unavailable{What: "kernel structures differ from what the programs read", Err: err}
	}
	t := &Tracer{filter: !o.AllProcesses}

	cs := &ebpf.CollectionSpec{Maps: mapSpecs(), Programs: map[string]*ebpf.ProgramSpec{}}
	raw := func(name string, ins asm.Instructions) {
		cs.Programs[name] = &ebpf.ProgramSpec{Name: "tc_" + name, Type: ebpf.RawTracepoint,
			License: "GPL", Instructions: ins}
	}
	raw("sys_enter", sysEnter(off, t.filter))
	raw("sys_exit", sysExit(off))
	raw("fuse_request_send", fuseSend(off))
	raw("fuse_request_end", fuseEnd(off))
	raw("block_rq_issue", blockIssue(off))
	raw("block_rq_complete", blockComplete())
	if t.filter {
		raw("sched_process_fork", processFork(off))
	}

	// Maps first: this is where a forbidden bpf() shows, clearly.
	maps := make(map[string]*ebpf.Map)
	closeMaps := func() {
		for _, m := range maps {
			m.Close()
		}
	}
	for name, ms := range cs.Maps {
		m, err := ebpf.NewMap(ms)
		if err != nil {
			closeMaps()
			if errors.Is(err, unix.EPERM) {
				return nil, &Unavailable{What: "bpf() not permitted (needs root, or CAP_BPF and CAP_PERFMON)", Err: err}
			}
			return nil, &Unavailable{What: "cannot create BPF maps", Err: err}
		}
		maps[name] = m
	}
	coll := &ebpf.Collection{Maps: maps, Programs: map[string]*ebpf.Program{}}
	t.coll = coll
	for name, ps := range cs.Programs {
		ps.Instructions = append(asm.Instructions(nil), ps.Instructions...)
		for i := range ps.Instructions {
			if ref := ps.Instructions[i].Reference(); ref != "" {
				if m, ok := maps[ref]; ok {
					if err := ps.Instructions[i].AssociateMap(m); err != nil {
						t.Close()
						return nil, err
					}
				}
			}
		}
		p, err := ebpf.NewProgram(ps)
		if err != nil {
			t.Close()
			return nil, &Unavailable{What: "kernel refused program " + name, Err: err}
		}
		coll.Programs[name] = p
	}

	if err := t.fillSyscalls(off); err != nil {
		t.Close()
		return nil, err
	}
	for _, pid := range o.Pids {
		if err := t.AddProcess(pid); err != nil {
			t.Close()
			return nil, err
		}
	}

	// Attach: the ends before the starts, so that no start lacks its end.
	for _, name := range []string{"sys_exit", "sys_enter", "sched_process_fork"} {
		if p := coll.Programs[name]; p != nil {
			l, err := link.AttachRawTracepoint(link.RawTracepointOptions{Name: name, Program: p})
			if err != nil {
				t.Close()
				return nil, &Unavailable{What: "no tracepoint " + name, Err: err}
			}
			t.links = append(t.links, l)
		}
	}
	for _, pair := range [][2]string{{"fuse_request_end", "fuse_request_send"}, {"block_rq_complete", "block_rq_issue"}} {
		var ls []link.Link
		for _, name := range pair {
			l, err := link.AttachRawTracepoint(link.RawTracepointOptions{Name: name, Program: coll.Programs[name]})
			if err != nil {
				t.note("no tracepoint " + name + ": " + err.Error())
				break
			}
			ls = append(ls, l)
		}
		if len(ls) < 2 {
			for _, l := range ls {
				l.Close()
			}
			continue
		}
		t.links = append(t.links, ls...)
	}
	return t, nil
}

func (t *Tracer) note(s string) { t.notes = append(t.notes, s) }

// Notes are what this kernel leaves untraced (empty when all is traced).
func (t *Tracer) Notes() []string { return t.notes }

func (t *Tracer) fillSyscalls(o offsets) error {
	m := t.coll.Maps["fsnr"]
	for nr, sc := range fsSyscalls {
		if nr >= maxSyscall {
			continue
		}
		if err := m.Put(uint32(nr), classWord(o, sc.class, sc.dirfd, sc.path, sc.buf)); err != nil {
			return fmt.Errorf("trace: filling syscall table: %w", err)
		}
	}
	return nil
}

// AddProcess follows pid's system calls, and its future children's.
func (t *Tracer) AddProcess(pid int) error {
	if !t.filter {
		return nil
	}
	if err := t.coll.Maps["procs"].Put(uint32(pid), uint32(1)); err != nil {
		return fmt.Errorf("trace: following process %d: %w", pid, err)
	}
	return nil
}

// KernelDev is st_dev as the kernel's structures hold it (major<<20 |
// minor): FUSE's `connection`, s_dev, the block tracepoints' dev.
func KernelDev(stDev uint64) uint32 {
	return unix.Major(stDev)<<20 | unix.Minor(stDev)
}

// AddTarget traces the filesystem mounted at path (any path on it).
func (t *Tracer) AddTarget(path string) (Target, error) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return Target{}, fmt.Errorf("trace: target %s: %w", path, err)
	}
	tg := Target{Path: path, Dev: KernelDev(st.Dev), Disk: disksBelow(unix.Major(st.Dev), unix.Minor(st.Dev))}
	m := t.coll.Maps["targets"]
	for _, d := range append([]uint32{tg.Dev}, tg.Disk...) {
		if err := m.Put(d, uint32(1)); err != nil {
			return Target{}, fmt.Errorf("trace: target %s: %w", path, err)
		}
	}
	// Absolute paths are matched against the mount point as the
	// workload would spell it: absolute, clean, symlinks resolved.
	if abs, err := filepath.Abs(path); err == nil {
		real, err := filepath.EvalSymlinks(abs)
		if err == nil && len(real) >= pathBufSize-1 {
			t.mu.Lock()
			t.note(fmt.Sprintf("absolute paths under %s are not matched (the programs compare %d bytes)", real, pathBufSize-2))
			t.mu.Unlock()
		}
		if err == nil && real != "/" && len(real) < pathBufSize-1 {
			key := struct {
				Hash     uint64
				Len, Pad uint32
			}{pathHash(real), uint32(len(real)), 0}
			if err := t.coll.Maps["prefixes"].Put(key, tg.Dev); err != nil {
				return Target{}, fmt.Errorf("trace: target %s: %w", path, err)
			}
		}
	}
	t.mu.Lock()
	t.targets = append(t.targets, tg)
	t.mu.Unlock()
	return tg, nil
}

// Targets are the traced filesystems.
func (t *Tracer) Targets() []Target {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]Target(nil), t.targets...)
}

// disksBelow lists the request-based disks a block device's I/O ends on:
// a partition's disk, a device-mapper or md device's slaves (recursively),
// the device itself. Nothing for a filesystem without a block device.
func disksBelow(major, minor uint32) []uint32 {
	dir := fmt.Sprintf("/sys/dev/block/%d:%d", major, minor)
	real, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return nil
	}
	if _, err := os.Stat(filepath.Join(real, "partition")); err == nil {
		real = filepath.Dir(real)
	}
	seen := map[uint32]bool{}
	var out []uint32
	var walk func(p string, depth int)
	walk = func(p string, depth int) {
		slaves, _ := os.ReadDir(filepath.Join(p, "slaves"))
		if len(slaves) > 0 && depth < 8 {
			for _, s := range slaves {
				sp, err := filepath.EvalSymlinks(filepath.Join(p, "slaves", s.Name()))
				if err != nil {
					continue
				}
				if _, err := os.Stat(filepath.Join(sp, "partition")); err == nil {
					sp = filepath.Dir(sp)
				}
				walk(sp, depth+1)
			}
			return
		}
		b, err := os.ReadFile(filepath.Join(p, "dev"))
		if err != nil {
			return
		}
		maj, min, ok := strings.Cut(strings.TrimSpace(string(b)), ":")
		if !ok {
			return
		}
		ma, err1 := strconv.ParseUint(maj, 10, 32)
		mi, err2 := strconv.ParseUint(min, 10, 32)
		if err1 != nil || err2 != nil {
			return
		}
		d := uint32(ma)<<20 | uint32(mi)
		if !seen[d] {
			seen[d] = true
			out = append(out, d)
		}
	}
	walk(real, 0)
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// Close detaches every program and frees the maps. Safe to call twice.
func (t *Tracer) Close() error {
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return nil
	}
	t.closed = true
	t.mu.Unlock()
	var errs []error
	for _, l := range t.links {
		if err := l.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	t.links = nil
	if t.coll != nil {
		t.coll.Close()
	}
	return errors.Join(errs...)
}

// Snapshot reads the kernel's histograms: all samples since New.
func (t *Tracer) Snapshot() (Snapshot, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return Snapshot{}, errors.New("trace: tracer closed")
	}
	names := map[uint32]string{}
	for _, tg := range t.targets {
		names[tg.Dev] = tg.Path
		for _, d := range tg.Disk {
			if _, ok := names[d]; !ok {
				names[d] = tg.Path
			}
		}
	}
	type key struct{ kind, code, dev uint32 }
	series := map[key]*Series{}
	var k struct{ Kind, Code, Dev, Bucket uint32 }
	var n uint64
	it := t.coll.Maps["hist"].Iterate()
	for it.Next(&k, &n) {
		code := k.Code &^ errFlag
		sk := key{k.Kind, code, k.Dev}
		s := series[sk]
		if s == nil {
			s = &Series{Dev: k.Dev, Target: names[k.Dev], buckets: map[uint32]int64{}}
			if s.Target == "" {
				s.Target = fmt.Sprintf("%d:%d", k.Dev>>20, k.Dev&(1<<20-1))
			}
			switch k.Kind {
			case kindSyscall:
				s.Layer, s.Op = LayerSyscall, fsSyscalls[int(code)].name
			case kindFUSE:
				s.Layer, s.Op = LayerFUSE, FUSEOpName(code)
			case kindBlock:
				s.Layer, s.Op = LayerBlock, blockOpName(code)
			default:
				continue
			}
			series[sk] = s
		}
		s.Count += int64(n)
		if k.Code&errFlag != 0 {
			s.Errors += int64(n)
		}
		s.buckets[k.Bucket] += int64(n)
	}
	if err := it.Err(); err != nil {
		return Snapshot{}, fmt.Errorf("trace: reading histograms: %w", err)
	}
	snap := Snapshot{Taken: time.Now()}
	for _, s := range series {
		snap.Series = append(snap.Series, *s)
	}
	sortSeries(snap.Series)
	return snap, nil
}

// ProgramStat is the kernel's account of one of the tracer's programs:
// how often it ran and its total run time, counted only while BPF run-time
// statistics are on (EnableRunStats, or sysctl kernel.bpf_stats_enabled).
type ProgramStat struct {
	Runs  uint64
	Total time.Duration
}

// ProgramStats returns each program's runs and run time so far, by the
// tracepoint it is attached to: the programs' own cost per event, apart
// from the noise of a loaded machine.
func (t *Tracer) ProgramStats() (map[string]ProgramStat, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return nil, errors.New("trace: tracer closed")
	}
	out := map[string]ProgramStat{}
	for name, p := range t.coll.Programs {
		st, err := p.Stats()
		if err != nil {
			return nil, fmt.Errorf("trace: stats of %s: %w", name, err)
		}
		out[name] = ProgramStat{Runs: st.RunCount, Total: st.Runtime}
	}
	return out, nil
}

// EnableRunStats turns on the kernel's BPF run-time statistics (for every
// BPF program on the machine, a clock read per run) until closed.
func EnableRunStats() (io.Closer, error) {
	return ebpf.EnableStats(uint32(unix.BPF_STATS_RUN_TIME))
}

// ProgramIDs are the kernel's ids of the tracer's programs (as bpftool
// prog show lists them), sorted.
func (t *Tracer) ProgramIDs() []ebpf.ProgramID {
	t.mu.Lock()
	defer t.mu.Unlock()
	var ids []ebpf.ProgramID
	if t.closed {
		return nil
	}
	for _, p := range t.coll.Programs {
		if info, err := p.Info(); err == nil {
			if id, ok := info.ID(); ok {
				ids = append(ids, id)
			}
		}
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	return ids
}
