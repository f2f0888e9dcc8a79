//go:build linux

package trace

import (
	"fmt"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
)

// The programs are written with cilium/ebpf's asm package: a handful of
// instructions each, assembled after the kernel's structure offsets are
// read from its BTF (offsets.go), so neither clang nor a committed object
// is needed and the same binary follows any kernel's layout.
//
// Every pointer is followed with bpf_probe_read_kernel, so a structure
// that changed under us reads as zero or fails, never faults.
//
// Stack layout shared by all programs (r10 is the frame pointer):
//
//	fp-8   scratch: probe-read destination, u32 map keys
//	fp-16  u64 key: pid_tgid or a struct request pointer
//	fp-32  16-byte key: histogram key or FUSE in-flight key
//	fp-48  16-byte value: in-flight entry {u64 start ns; u32; u32}
//	fp-56  u64 now (ns), taken first thing in the ending programs
//	fp-64  u64 elapsed ns
//	fp-72  u64 a return value or error
//	fp-80  u64 a saved device
//	fp-88  u64 a syscall's class word (see classWord)
//	fp-96  u64 a stat's buffer (user address)
//	       (sysEnter uses fp-64 and fp-72 for the nr and the path)
//	fp-120 24-byte value: in-flight syscall {u64 start; u32 nr; u32 dev;
//	       u64 stat buffer}
const (
	stScratch = -8
	stKey8    = -16
	stKey16   = -32
	stVal16   = -48
	stNow     = -56
	stDelta   = -64
	stRet     = -72
	stDev     = -80
	stClass   = -88
	stAux     = -96
	stVal24   = -120
	stPath    = -72 // sysEnter: the path argument (user address)
	stNr      = -64 // sysEnter: the syscall nr, kept across prefixDev
)

// Histogram kinds, the first word of a histogram key.
const (
	kindSyscall = 1
	kindFUSE    = 2
	kindBlock   = 3
)

// errFlag is or-ed into a histogram key's code when the operation failed.
const errFlag = 0x10000

// Syscall classes in the fsnr map: how a system call's target is found.
const (
	classNone  = 0
	classFd    = 1 // first argument is a descriptor: resolved at entry
	classPath  = 2 // a path: its starting directory's device
	classOpen  = 3 // a path, and the new descriptor's device at exit
	classStat  = 4 // a path, and the st_dev of the struct stat it fills
	classStatx = 5 // a path, and the stx_dev of the struct statx it fills
)

// noArg marks an argument a class word does not have.
const noArg = 0xff

// classWord is a syscall's fsnr entry: its class, and the offsets in
// struct pt_regs of its dirfd, path and stat-buffer arguments (noArg
// when it has none) in bits 8, 16 and 24.
func classWord(o offsets, class uint32, dirfd, path, buf int) uint32 {
	off := func(i int) uint32 {
		if i < 0 {
			return noArg
		}
		return uint32(o.regsArg[i])
	}
	return class | off(dirfd)<<8 | off(path)<<16 | off(buf)<<24
}

// maxSyscall bounds the syscall numbers the fsnr array covers.
const maxSyscall = 512

// builder appends instructions and makes unique jump labels.
type builder struct {
	name    string
	ins     asm.Instructions
	n       int
	pending string // a label for the next instruction
}

func (b *builder) emit(ins ...asm.Instruction) {
	for _, in := range ins {
		if b.pending != "" {
			in = in.WithSymbol(b.pending)
			b.pending = ""
		}
		b.ins = append(b.ins, in)
	}
}

func (b *builder) label() string {
	b.n++
	return fmt.Sprintf("%s_%d", b.name, b.n)
}

// mark gives the next instruction a label; of two labels in a row the
// first goes on a "ja +0", the verifier's no-op.
func (b *builder) mark(l string) {
	if b.pending != "" {
		b.emit(asm.Instruction{OpCode: asm.OpCode(asm.JumpClass).SetJumpOp(asm.Ja)})
	}
	b.pending = l
}

// exit0 returns 0 from the program.
func (b *builder) exit0() {
	b.emit(asm.Mov.Imm(asm.R0, 0), asm.Return())
}

// read loads size bytes (4 or 8) at src+off from kernel memory into dst,
// jumping to fail when the read faults. dst may be any register; src is
// consumed before the call.
func (b *builder) read(dst, src asm.Register, off int32, size asm.Size, fail string) {
	b.emit(
		asm.Mov.Reg(asm.R3, src),
		asm.Add.Imm(asm.R3, off),
		asm.Mov.Reg(asm.R1, asm.RFP),
		asm.Add.Imm(asm.R1, stScratch),
		asm.Mov.Imm(asm.R2, int32(size.Sizeof())),
		asm.FnProbeReadKernel.Call(),
		asm.JNE.Imm(asm.R0, 0, fail),
		asm.LoadMem(dst, asm.RFP, stScratch, size),
	)
}

// readPtr is read of a pointer that must not be NULL.
func (b *builder) readPtr(dst, src asm.Register, off int32, fail string) {
	b.read(dst, src, off, asm.DWord, fail)
	b.emit(asm.JEq.Imm(dst, 0, fail))
}

// lookup calls bpf_map_lookup_elem(map, fp+keyOff): r0 is the value or 0.
func (b *builder) lookup(m string, keyOff int16) {
	b.emit(
		asm.LoadMapPtr(asm.R1, 0).WithReference(m),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, int32(keyOff)),
		asm.FnMapLookupElem.Call(),
	)
}

// isTarget jumps to miss unless the u32 device in reg is a target.
func (b *builder) isTarget(reg asm.Register, miss string) {
	b.emit(asm.StoreMem(asm.RFP, stScratch, reg, asm.Word))
	b.lookup("targets", stScratch)
	b.emit(asm.JEq.Imm(asm.R0, 0, miss))
}

// fdDev sets out to the device (s_dev) of the current task's descriptor
// fd, jumping to fail when it has none. fd and walk are callee-saved
// registers; fd is consumed.
func (b *builder) fdDev(o offsets, fd, walk, out asm.Register, fail string) {
	b.emit(
		asm.JSLT.Imm(fd, 0, fail),
		asm.FnGetCurrentTask.Call(),
		asm.Mov.Reg(walk, asm.R0),
	)
	b.readPtr(walk, walk, o.taskFiles, fail)
	b.readPtr(walk, walk, o.filesFdt, fail)
	b.read(asm.R1, walk, o.fdtMaxFds, asm.Word, fail)
	b.emit(asm.JGE.Reg(fd, asm.R1, fail))
	b.readPtr(walk, walk, o.fdtFd, fail)
	b.emit(
		asm.LSh.Imm(fd, 3),
		asm.Add.Reg(walk, fd),
	)
	b.readPtr(walk, walk, 0, fail)
	b.readPtr(walk, walk, o.fileInode, fail)
	b.readPtr(walk, walk, o.inodeSb, fail)
	b.read(out, walk, o.sbDev, asm.Word, fail)
}

// recordElapsed ends a program that has measured a latency: the elapsed
// ns stored at stDelta recorded as record says, then exit at label out
// (where the program's early exits jump).
func (b *builder) recordElapsed(kind int32, out string) asm.Instructions {
	b.emit(asm.LoadMem(asm.R9, asm.RFP, stDelta, asm.DWord))
	b.record(kind)
	b.mark(out)
	b.exit0()
	return b.ins
}

// record adds one sample to the histogram: kind, code (r7), device (r8),
// elapsed ns (r9). The bucket is log-linear: values below 16 ns are
// exact; above, each power of two is cut into 16 equal parts, so a
// bucket is at most 1/16 of its value wide (bucketRange is the inverse).
func (b *builder) record(kind int32) {
	have, done, add := b.label(), b.label(), b.label()
	b.emit(
		asm.Mov.Reg(asm.R2, asm.R9),
		asm.JLT.Imm(asm.R9, 16, have),
		// r2 = floor(log2(r9)) by binary search, r3 the shifted value.
		asm.Mov.Reg(asm.R3, asm.R9),
		asm.Mov.Imm(asm.R2, 0),
	)
	for _, s := range []int32{32, 16, 8, 4, 2, 1} {
		skip := b.label()
		b.emit(
			asm.Mov.Reg(asm.R4, asm.R3),
			asm.RSh.Imm(asm.R4, s),
			asm.JEq.Imm(asm.R4, 0, skip),
			asm.Mov.Reg(asm.R3, asm.R4),
			asm.Add.Imm(asm.R2, s),
		)
		b.mark(skip)
	}
	b.emit(
		// minor = (v >> (msb-4)) & 15; bucket = (msb-3)*16 + minor
		asm.Mov.Reg(asm.R4, asm.R2),
		asm.Sub.Imm(asm.R4, 4),
		asm.Mov.Reg(asm.R5, asm.R9),
		asm.RSh.Reg(asm.R5, asm.R4),
		asm.And.Imm(asm.R5, 15),
		asm.Sub.Imm(asm.R2, 3),
		asm.LSh.Imm(asm.R2, 4),
		asm.Add.Reg(asm.R2, asm.R5),
	)
	b.mark(have)
	b.emit(
		asm.StoreImm(asm.RFP, stKey16, int64(kind), asm.Word),
		asm.StoreMem(asm.RFP, stKey16+4, asm.R7, asm.Word),
		asm.StoreMem(asm.RFP, stKey16+8, asm.R8, asm.Word),
		asm.StoreMem(asm.RFP, stKey16+12, asm.R2, asm.Word),
	)
	b.lookup("hist", stKey16)
	b.emit(
		asm.JNE.Imm(asm.R0, 0, add),
		// First sample of this key: insert 1, unless another CPU just
		// inserted it, in which case add to theirs.
		asm.Mov.Imm(asm.R1, 1),
		asm.StoreMem(asm.RFP, stVal16, asm.R1, asm.DWord),
		asm.LoadMapPtr(asm.R1, 0).WithReference("hist"),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, stKey16),
		asm.Mov.Reg(asm.R3, asm.RFP),
		asm.Add.Imm(asm.R3, stVal16),
		asm.Mov.Imm(asm.R4, 1), // BPF_NOEXIST
		asm.FnMapUpdateElem.Call(),
		asm.JEq.Imm(asm.R0, 0, done),
	)
	b.lookup("hist", stKey16)
	b.emit(asm.JEq.Imm(asm.R0, 0, done))
	b.mark(add)
	b.emit(
		asm.Mov.Imm(asm.R1, 1),
		asm.AddAtomic.Mem(asm.R0, asm.R1, asm.DWord, 0),
	)
	b.mark(done)
}

// deleteKey calls bpf_map_delete_elem(map, fp+keyOff).
func (b *builder) deleteKey(m string, keyOff int16) {
	b.emit(
		asm.LoadMapPtr(asm.R1, 0).WithReference(m),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, int32(keyOff)),
		asm.FnMapDeleteElem.Call(),
	)
}

// elapsed stores now - start (start in a register other than r2) at
// stDelta.
func (b *builder) elapsed(start asm.Register) {
	b.emit(
		asm.LoadMem(asm.R2, asm.RFP, stNow, asm.DWord),
		asm.Sub.Reg(asm.R2, start),
		asm.StoreMem(asm.RFP, stDelta, asm.R2, asm.DWord),
	)
}

func (b *builder) now() {
	b.emit(
		asm.FnKtimeGetNs.Call(),
		asm.StoreMem(asm.RFP, stNow, asm.R0, asm.DWord),
	)
}

// sysEnter: raw tracepoint raw_syscalls:sys_enter, TP_PROTO(struct
// pt_regs *regs, long id): ctx[0] = regs, ctx[1] = id. For a filesystem
// syscall of a traced process it stores {start, nr, dev, statbuf} under
// the thread's pid_tgid. dev is the descriptor's device for classFd; for
// a call with a path, the device of the directory a relative path starts
// from (its dirfd, or the working directory), 0 for an absolute path.
// sysExit may correct it: an open's new descriptor, a stat's st_dev.
func sysEnter(o offsets, filter bool) asm.Instructions {
	b := &builder{name: "sys_enter"}
	out := "sys_enter_out"
	b.emit(
		asm.Mov.Reg(asm.R6, asm.R1),
		asm.FnGetCurrentPidTgid.Call(),
		asm.StoreMem(asm.RFP, stKey8, asm.R0, asm.DWord),
	)
	if filter {
		b.emit(
			asm.RSh.Imm(asm.R0, 32),
			asm.StoreMem(asm.RFP, stScratch, asm.R0, asm.Word),
		)
		b.lookup("procs", stScratch)
		b.emit(asm.JEq.Imm(asm.R0, 0, out))
	}
	b.emit(
		asm.LoadMem(asm.R7, asm.R6, 8, asm.DWord),
		asm.JSLT.Imm(asm.R7, 0, out),
		asm.JGE.Imm(asm.R7, maxSyscall, out),
		asm.StoreMem(asm.RFP, stScratch, asm.R7, asm.Word),
	)
	b.lookup("fsnr", stScratch)
	b.emit(
		asm.JEq.Imm(asm.R0, 0, out),
		asm.LoadMem(asm.R8, asm.R0, 0, asm.Word),
		asm.JEq.Imm(asm.R8, classNone, out),
		asm.StoreMem(asm.RFP, stClass, asm.R8, asm.DWord),
		asm.Mov.Imm(asm.R9, 0),
		asm.StoreMem(asm.RFP, stAux, asm.R9, asm.DWord),
	)
	store, pathCase, noDev, cwd, statBuf, abs := b.label(), b.label(), b.label(), b.label(), b.label(), b.label()
	b.emit(
		asm.Mov.Reg(asm.R1, asm.R8),
		asm.And.Imm(asm.R1, 0xff),
		asm.JNE.Imm(asm.R1, classFd, pathCase),
		asm.LoadMem(asm.R1, asm.R6, 0, asm.DWord),
	)
	b.read(asm.R9, asm.R1, o.regsArg[0], asm.DWord, out)
	b.fdDev(o, asm.R9, asm.R8, asm.R9, out)
	b.emit(asm.Ja.Label(store))

	// A path: absolute, or relative to dirfd or the working directory?
	b.mark(pathCase)
	b.emit(
		asm.Mov.Reg(asm.R1, asm.R8),
		asm.RSh.Imm(asm.R1, 16),
		asm.And.Imm(asm.R1, 0xff),
		asm.JEq.Imm(asm.R1, noArg, statBuf),
		asm.LoadMem(asm.R2, asm.R6, 0, asm.DWord),
		asm.Add.Reg(asm.R2, asm.R1),
	)
	b.read(asm.R3, asm.R2, 0, asm.DWord, statBuf)
	b.emit(
		asm.StoreMem(asm.RFP, stPath, asm.R3, asm.DWord),
		asm.Mov.Reg(asm.R1, asm.RFP),
		asm.Add.Imm(asm.R1, stScratch),
		asm.Mov.Imm(asm.R2, 1),
		asm.FnProbeReadUser.Call(),
		asm.JNE.Imm(asm.R0, 0, statBuf),
		asm.LoadMem(asm.R1, asm.RFP, stScratch, asm.Byte),
		asm.JEq.Imm(asm.R1, '/', abs),
		asm.Mov.Reg(asm.R1, asm.R8),
		asm.RSh.Imm(asm.R1, 8),
		asm.And.Imm(asm.R1, 0xff),
		asm.JEq.Imm(asm.R1, noArg, cwd),
		asm.LoadMem(asm.R2, asm.R6, 0, asm.DWord),
		asm.Add.Reg(asm.R2, asm.R1),
	)
	b.read(asm.R9, asm.R2, 0, asm.DWord, noDev)
	b.emit(
		// dirfd is an int: the register's low half, sign-extended.
		asm.LSh.Imm(asm.R9, 32),
		asm.ArSh.Imm(asm.R9, 32),
		asm.JEq.Imm(asm.R9, -100, cwd), // AT_FDCWD
	)
	b.fdDev(o, asm.R9, asm.R8, asm.R9, noDev)
	b.emit(asm.Ja.Label(statBuf))
	b.mark(cwd)
	b.emit(
		asm.FnGetCurrentTask.Call(),
		asm.Mov.Reg(asm.R8, asm.R0),
	)
	b.readPtr(asm.R8, asm.R8, o.taskFs, noDev)
	b.readPtr(asm.R8, asm.R8, o.fsPwd+o.pathDentry, noDev)
	b.readPtr(asm.R8, asm.R8, o.dentrySb, noDev)
	b.read(asm.R9, asm.R8, o.sbDev, asm.Word, noDev)
	b.emit(asm.Ja.Label(statBuf))
	b.mark(abs)
	b.prefixDev(statBuf)
	b.emit(asm.Ja.Label(statBuf))
	b.mark(noDev)
	b.emit(asm.Mov.Imm(asm.R9, 0))

	// A stat's buffer, for its st_dev at exit.
	b.mark(statBuf)
	b.emit(
		asm.LoadMem(asm.R8, asm.RFP, stClass, asm.DWord),
		asm.Mov.Reg(asm.R1, asm.R8),
		asm.And.Imm(asm.R1, 0xff),
		asm.JLT.Imm(asm.R1, classStat, store),
		asm.RSh.Imm(asm.R8, 24),
		asm.LoadMem(asm.R2, asm.R6, 0, asm.DWord),
		asm.Add.Reg(asm.R2, asm.R8),
	)
	b.read(asm.R1, asm.R2, 0, asm.DWord, store)
	b.emit(asm.StoreMem(asm.RFP, stAux, asm.R1, asm.DWord))

	b.mark(store)
	b.emit(
		asm.StoreMem(asm.RFP, stVal24+8, asm.R7, asm.Word),
		asm.StoreMem(asm.RFP, stVal24+12, asm.R9, asm.Word),
		asm.LoadMem(asm.R1, asm.RFP, stAux, asm.DWord),
		asm.StoreMem(asm.RFP, stVal24+16, asm.R1, asm.DWord),
		asm.FnKtimeGetNs.Call(),
		asm.StoreMem(asm.RFP, stVal24, asm.R0, asm.DWord),
		asm.LoadMapPtr(asm.R1, 0).WithReference("sysin"),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, stKey8),
		asm.Mov.Reg(asm.R3, asm.RFP),
		asm.Add.Imm(asm.R3, stVal24),
		asm.Mov.Imm(asm.R4, 0), // BPF_ANY
		asm.FnMapUpdateElem.Call(),
	)
	b.mark(out)
	b.exit0()
	return b.ins
}

// prefixDev sets r9 to the device of the longest target mount point that
// is a prefix of the absolute path at stPath (0: none), comparing hashes:
// the path is copied (127 bytes at most) and hashed byte by byte, h =
// h*31 + c, and at every '/' and at its end the hash and length of the
// prefix so far are looked up in the prefixes map. r7 (the syscall nr) is
// kept; r8 is used.
func (b *builder) prefixDev(fail string) {
	loop, next, last, done := b.label(), b.label(), b.label(), b.label()
	b.emit(
		asm.StoreMem(asm.RFP, stNr, asm.R7, asm.DWord),
		asm.Mov.Imm(asm.R9, 0),
		asm.StoreMem(asm.RFP, stDev, asm.R9, asm.DWord),
		asm.StoreImm(asm.RFP, stScratch, 0, asm.Word),
	)
	b.lookup("pathbuf", stScratch)
	b.emit(
		asm.JEq.Imm(asm.R0, 0, fail),
		asm.Mov.Reg(asm.R8, asm.R0),
		asm.Mov.Reg(asm.R1, asm.R0),
		asm.Mov.Imm(asm.R2, pathBufSize),
		asm.LoadMem(asm.R3, asm.RFP, stPath, asm.DWord),
		asm.FnProbeReadUserStr.Call(),
		asm.JSLE.Imm(asm.R0, 0, fail),
		asm.Mov.Imm(asm.R7, 0), // i
	)
	b.mark(loop)
	b.emit(
		asm.JGE.Imm(asm.R7, pathBufSize-1, done),
		asm.Mov.Reg(asm.R1, asm.R8),
		asm.Add.Reg(asm.R1, asm.R7),
		asm.LoadMem(asm.R2, asm.R1, 0, asm.Byte),
		asm.JEq.Imm(asm.R2, 0, last),
		asm.JNE.Imm(asm.R2, '/', next),
		asm.JEq.Imm(asm.R7, 0, next),
	)
	b.prefixLookup()
	b.emit(
		asm.Mov.Reg(asm.R1, asm.R8),
		asm.Add.Reg(asm.R1, asm.R7),
		asm.LoadMem(asm.R2, asm.R1, 0, asm.Byte),
	)
	b.mark(next)
	b.emit(
		asm.Mul.Imm(asm.R9, 31),
		asm.Add.Reg(asm.R9, asm.R2),
		asm.Add.Imm(asm.R7, 1),
		asm.Ja.Label(loop),
	)
	b.mark(last)
	b.prefixLookup()
	b.mark(done)
	b.emit(
		asm.LoadMem(asm.R9, asm.RFP, stDev, asm.DWord),
		asm.LoadMem(asm.R7, asm.RFP, stNr, asm.DWord),
	)
}

// prefixLookup looks up {hash r9, length r7} in prefixes and, if found,
// stores its device at stDev.
func (b *builder) prefixLookup() {
	miss := b.label()
	b.emit(
		asm.StoreMem(asm.RFP, stKey16, asm.R9, asm.DWord),
		asm.StoreMem(asm.RFP, stKey16+8, asm.R7, asm.Word),
		asm.StoreImm(asm.RFP, stKey16+12, 0, asm.Word),
	)
	b.lookup("prefixes", stKey16)
	b.emit(
		asm.JEq.Imm(asm.R0, 0, miss),
		asm.LoadMem(asm.R1, asm.R0, 0, asm.Word),
		asm.StoreMem(asm.RFP, stDev, asm.R1, asm.DWord),
	)
	b.mark(miss)
}

// pathBufSize is the per-CPU buffer an absolute path is copied to.
const pathBufSize = 128

// pathHash is prefixDev's hash of a path.
func pathHash(p string) uint64 {
	var h uint64
	for i := 0; i < len(p); i++ {
		h = h*31 + uint64(p[i])
	}
	return h
}

// sysExit: raw tracepoint raw_syscalls:sys_exit, TP_PROTO(struct pt_regs
// *regs, long ret): ctx[1] = ret. Ends the thread's entry, takes an
// open's device from its new descriptor and a successful stat's from the
// st_dev it returns, and records the time if the device is a target.
func sysExit(o offsets) asm.Instructions {
	b := &builder{name: "sys_exit"}
	out := "sys_exit_out"
	b.emit(asm.Mov.Reg(asm.R6, asm.R1))
	b.now()
	b.emit(
		asm.FnGetCurrentPidTgid.Call(),
		asm.StoreMem(asm.RFP, stKey8, asm.R0, asm.DWord),
	)
	b.lookup("sysin", stKey8)
	b.emit(
		asm.JEq.Imm(asm.R0, 0, out),
		asm.LoadMem(asm.R7, asm.R0, 8, asm.Word),
		asm.LoadMem(asm.R8, asm.R0, 12, asm.Word),
		asm.LoadMem(asm.R1, asm.R0, 16, asm.DWord),
		asm.StoreMem(asm.RFP, stAux, asm.R1, asm.DWord),
		asm.LoadMem(asm.R1, asm.R0, 0, asm.DWord),
		asm.StoreMem(asm.RFP, stDev, asm.R8, asm.DWord),
	)
	b.elapsed(asm.R1)
	b.deleteKey("sysin", stKey8)
	b.emit(
		asm.LoadMem(asm.R1, asm.R6, 8, asm.DWord),
		asm.StoreMem(asm.RFP, stRet, asm.R1, asm.DWord),
		asm.StoreMem(asm.RFP, stScratch, asm.R7, asm.Word),
	)
	check, keep, stat, statx := b.label(), b.label(), b.label(), b.label()
	b.lookup("fsnr", stScratch)
	b.emit(
		asm.JEq.Imm(asm.R0, 0, out),
		asm.LoadMem(asm.R1, asm.R0, 0, asm.Word),
		asm.And.Imm(asm.R1, 0xff),
		asm.JEq.Imm(asm.R1, classStat, stat),
		asm.JEq.Imm(asm.R1, classStatx, statx),
		asm.JNE.Imm(asm.R1, classOpen, check),
		asm.LoadMem(asm.R9, asm.RFP, stRet, asm.DWord),
	)
	b.fdDev(o, asm.R9, asm.R8, asm.R8, keep)
	b.emit(asm.Ja.Label(check))
	b.mark(keep)
	b.emit(
		asm.LoadMem(asm.R8, asm.RFP, stDev, asm.DWord),
		asm.Ja.Label(check),
	)

	// struct stat's st_dev is new_encode_dev(dev): minor's low byte,
	// major << 8, minor's high bits << 12.
	b.mark(stat)
	b.readUserRet(0, check)
	b.emit(
		asm.Mov.Reg(asm.R8, asm.R1),
		asm.RSh.Imm(asm.R8, 8),
		asm.And.Imm(asm.R8, 0xfff),
		asm.LSh.Imm(asm.R8, 20),
		asm.Mov.Reg(asm.R2, asm.R1),
		asm.And.Imm(asm.R2, 0xff),
		asm.Or.Reg(asm.R8, asm.R2),
		asm.RSh.Imm(asm.R1, 12),
		asm.And.Imm(asm.R1, 0xfff00),
		asm.Or.Reg(asm.R8, asm.R1),
		asm.Ja.Label(check),
	)
	// struct statx: stx_dev_major (u32) at 136, stx_dev_minor at 140.
	b.mark(statx)
	b.readUserRet(136, check)
	b.emit(
		asm.Mov.Reg(asm.R8, asm.R1),
		asm.LSh.Imm(asm.R8, 44), // major's low 20 bits to the top,
		asm.RSh.Imm(asm.R8, 24), // then down to bits 20..39
		asm.RSh.Imm(asm.R1, 32),
		asm.Or.Reg(asm.R8, asm.R1),
	)

	b.mark(check)
	b.emit(asm.JEq.Imm(asm.R8, 0, out))
	b.isTarget(asm.R8, out)
	ok := b.label()
	b.emit(
		asm.LoadMem(asm.R1, asm.RFP, stRet, asm.DWord),
		asm.JSGE.Imm(asm.R1, 0, ok),
		asm.Or.Imm(asm.R7, errFlag),
	)
	b.mark(ok)
	return b.recordElapsed(kindSyscall, out)
}

// readUserRet: when the syscall returned 0 and saved a buffer, r1 = the
// u64 at buffer+off in user memory; else jump to skip (r8 untouched).
func (b *builder) readUserRet(off int32, skip string) {
	b.emit(
		asm.LoadMem(asm.R1, asm.RFP, stRet, asm.DWord),
		asm.JNE.Imm(asm.R1, 0, skip),
		asm.LoadMem(asm.R3, asm.RFP, stAux, asm.DWord),
		asm.JEq.Imm(asm.R3, 0, skip),
		asm.Add.Imm(asm.R3, off),
		asm.Mov.Reg(asm.R1, asm.RFP),
		asm.Add.Imm(asm.R1, stScratch),
		asm.Mov.Imm(asm.R2, 8),
		asm.FnProbeReadUser.Call(),
		asm.JNE.Imm(asm.R0, 0, skip),
		asm.LoadMem(asm.R1, asm.RFP, stScratch, asm.DWord),
	)
}

// fuseConn reads req->fm->fc->dev and req->in.h.unique (req in r6) into
// r7 and r8, jumping to out unless the connection is a target.
func (b *builder) fuseConn(o offsets, out string) {
	b.readPtr(asm.R7, asm.R6, o.reqFm, out)
	b.readPtr(asm.R7, asm.R7, o.fmFc, out)
	b.read(asm.R7, asm.R7, o.fcDev, asm.Word, out)
	b.isTarget(asm.R7, out)
	b.read(asm.R8, asm.R6, o.reqUnique, asm.DWord, out)
	b.emit(
		asm.StoreMem(asm.RFP, stKey16, asm.R8, asm.DWord),
		asm.StoreMem(asm.RFP, stKey16+8, asm.R7, asm.Word),
		asm.StoreImm(asm.RFP, stKey16+12, 0, asm.Word),
	)
}

// fuseSend: raw tracepoint fuse:fuse_request_send, TP_PROTO(const struct
// fuse_req *req): ctx[0] = req. Fired as the request is queued for the
// daemon, on /dev/fuse and on io_uring alike; stores {start, opcode}
// under (unique, connection).
func fuseSend(o offsets) asm.Instructions {
	b := &builder{name: "fuse_send"}
	out := "fuse_send_out"
	b.emit(asm.LoadMem(asm.R6, asm.R1, 0, asm.DWord))
	b.fuseConn(o, out)
	b.read(asm.R9, asm.R6, o.reqOpcode, asm.Word, out)
	b.emit(
		asm.StoreMem(asm.RFP, stVal16+8, asm.R9, asm.Word),
		asm.StoreImm(asm.RFP, stVal16+12, 0, asm.Word),
		asm.FnKtimeGetNs.Call(),
		asm.StoreMem(asm.RFP, stVal16, asm.R0, asm.DWord),
		asm.LoadMapPtr(asm.R1, 0).WithReference("fusein"),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, stKey16),
		asm.Mov.Reg(asm.R3, asm.RFP),
		asm.Add.Imm(asm.R3, stVal16),
		asm.Mov.Imm(asm.R4, 0),
		asm.FnMapUpdateElem.Call(),
	)
	b.mark(out)
	b.exit0()
	return b.ins
}

// fuseEnd: raw tracepoint fuse:fuse_request_end, TP_PROTO(const struct
// fuse_req *req), fired when the reply (or an abort) ends the request.
func fuseEnd(o offsets) asm.Instructions {
	b := &builder{name: "fuse_end"}
	out := "fuse_end_out"
	b.emit(asm.LoadMem(asm.R6, asm.R1, 0, asm.DWord))
	b.now()
	b.fuseConn(o, out)
	b.lookup("fusein", stKey16)
	b.emit(
		asm.JEq.Imm(asm.R0, 0, out),
		asm.LoadMem(asm.R1, asm.R0, 0, asm.DWord),
		asm.LoadMem(asm.R9, asm.R0, 8, asm.Word),
		asm.StoreMem(asm.RFP, stRet, asm.R9, asm.DWord),
	)
	b.elapsed(asm.R1)
	b.deleteKey("fusein", stKey16)
	b.emit(
		// r8 = conn (the key's second word), r7 = opcode.
		asm.LoadMem(asm.R8, asm.RFP, stKey16+8, asm.Word),
		asm.LoadMem(asm.R7, asm.RFP, stRet, asm.DWord),
	)
	ok := b.label()
	b.read(asm.R1, asm.R6, o.reqError, asm.Word, ok)
	b.emit(
		asm.JEq.Imm32(asm.R1, 0, ok),
		asm.Or.Imm(asm.R7, errFlag),
	)
	b.mark(ok)
	return b.recordElapsed(kindFUSE, out)
}

// blockIssue: raw tracepoint block:block_rq_issue, TP_PROTO(struct
// request *rq): ctx[0] = rq. Stores {start, dev, op} under rq for a
// target disk (dev as the tracepoint prints it: disk_devt(rq->q->disk)).
func blockIssue(o offsets) asm.Instructions {
	b := &builder{name: "blk_issue"}
	out := "blk_issue_out"
	b.emit(
		asm.LoadMem(asm.R6, asm.R1, 0, asm.DWord),
		asm.StoreMem(asm.RFP, stKey8, asm.R6, asm.DWord),
	)
	b.readPtr(asm.R7, asm.R6, o.rqQ, out)
	b.readPtr(asm.R7, asm.R7, o.qDisk, out)
	b.read(asm.R8, asm.R7, o.diskMajor, asm.Word, out)
	b.read(asm.R9, asm.R7, o.diskFirstMinor, asm.Word, out)
	b.emit(
		asm.LSh.Imm(asm.R8, 20),
		asm.Or.Reg(asm.R8, asm.R9),
	)
	b.isTarget(asm.R8, out)
	b.read(asm.R9, asm.R6, o.rqCmdFlags, asm.Word, out)
	b.emit(
		asm.And.Imm(asm.R9, 0xff), // REQ_OP_MASK
		asm.StoreMem(asm.RFP, stVal16+8, asm.R8, asm.Word),
		asm.StoreMem(asm.RFP, stVal16+12, asm.R9, asm.Word),
		asm.FnKtimeGetNs.Call(),
		asm.StoreMem(asm.RFP, stVal16, asm.R0, asm.DWord),
		asm.LoadMapPtr(asm.R1, 0).WithReference("blkin"),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, stKey8),
		asm.Mov.Reg(asm.R3, asm.RFP),
		asm.Add.Imm(asm.R3, stVal16),
		asm.Mov.Imm(asm.R4, 0),
		asm.FnMapUpdateElem.Call(),
	)
	b.mark(out)
	b.exit0()
	return b.ins
}

// blockComplete: raw tracepoint block:block_rq_complete, TP_PROTO(struct
// request *rq, blk_status_t error, unsigned int nr_bytes). The first
// completion of an issued request ends it (a partial one included).
func blockComplete() asm.Instructions {
	b := &builder{name: "blk_done"}
	out := "blk_done_out"
	b.emit(
		asm.Mov.Reg(asm.R6, asm.R1),
		asm.LoadMem(asm.R1, asm.R6, 0, asm.DWord),
		asm.StoreMem(asm.RFP, stKey8, asm.R1, asm.DWord),
	)
	b.now()
	b.lookup("blkin", stKey8)
	b.emit(
		asm.JEq.Imm(asm.R0, 0, out),
		asm.LoadMem(asm.R1, asm.R0, 0, asm.DWord),
		asm.LoadMem(asm.R8, asm.R0, 8, asm.Word),
		asm.LoadMem(asm.R7, asm.R0, 12, asm.Word),
	)
	b.elapsed(asm.R1)
	b.deleteKey("blkin", stKey8)
	ok := b.label()
	b.emit(
		asm.LoadMem(asm.R1, asm.R6, 8, asm.DWord),
		asm.And.Imm(asm.R1, 0xff), // blk_status_t is a u8
		asm.JEq.Imm(asm.R1, 0, ok),
		asm.Or.Imm(asm.R7, errFlag),
	)
	b.mark(ok)
	return b.recordElapsed(kindBlock, out)
}

// processFork: raw tracepoint sched:sched_process_fork, TP_PROTO(struct
// task_struct *parent, struct task_struct *child). A child of a traced
// process is traced: the workload's process tree follows itself.
func processFork(o offsets) asm.Instructions {
	b := &builder{name: "fork"}
	out := "fork_out"
	b.emit(
		asm.Mov.Reg(asm.R6, asm.R1),
		asm.LoadMem(asm.R7, asm.R6, 0, asm.DWord),
	)
	b.read(asm.R7, asm.R7, o.taskTgid, asm.Word, out)
	b.emit(asm.StoreMem(asm.RFP, stScratch, asm.R7, asm.Word))
	b.lookup("procs", stScratch)
	b.emit(
		asm.JEq.Imm(asm.R0, 0, out),
		asm.LoadMem(asm.R7, asm.R6, 8, asm.DWord),
	)
	b.read(asm.R7, asm.R7, o.taskTgid, asm.Word, out)
	b.emit(
		asm.StoreMem(asm.RFP, stKey8, asm.R7, asm.Word),
		asm.StoreImm(asm.RFP, stVal16, 1, asm.Word),
		asm.LoadMapPtr(asm.R1, 0).WithReference("procs"),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, stKey8),
		asm.Mov.Reg(asm.R3, asm.RFP),
		asm.Add.Imm(asm.R3, stVal16),
		asm.Mov.Imm(asm.R4, 0),
		asm.FnMapUpdateElem.Call(),
	)
	b.mark(out)
	b.exit0()
	return b.ins
}

// The maps. Keys and values are little structs of u32/u64 as the
// programs above lay them out on their stacks.
func mapSpecs() map[string]*ebpf.MapSpec {
	return map[string]*ebpf.MapSpec{
		// device (major<<20|minor) -> 1
		"targets": {Name: "tc_targets", Type: ebpf.Hash, KeySize: 4, ValueSize: 4, MaxEntries: 256},
		// tgid -> 1: the workload's processes
		"procs": {Name: "tc_procs", Type: ebpf.Hash, KeySize: 4, ValueSize: 4, MaxEntries: 1 << 16},
		// syscall nr -> class
		"fsnr": {Name: "tc_fsnr", Type: ebpf.Array, KeySize: 4, ValueSize: 4, MaxEntries: maxSyscall},
		// pid_tgid -> {start ns, nr, dev, stat buffer}: one syscall in
		// flight per thread
		"sysin": {Name: "tc_sysin", Type: ebpf.LRUHash, KeySize: 8, ValueSize: 24, MaxEntries: 1 << 14},
		// {unique, conn, 0} -> {start ns, opcode, 0}. LRU: a request
		// the kernel never ends (an aborted connection) ages out.
		"fusein": {Name: "tc_fusein", Type: ebpf.LRUHash, KeySize: 16, ValueSize: 16, MaxEntries: 1 << 16},
		// struct request * -> {start ns, dev, op}
		"blkin": {Name: "tc_blkin", Type: ebpf.LRUHash, KeySize: 8, ValueSize: 16, MaxEntries: 1 << 14},
		// {hash, length, 0} of a target's mount point -> its device
		"prefixes": {Name: "tc_prefixes", Type: ebpf.Hash, KeySize: 16, ValueSize: 4, MaxEntries: 256},
		// the absolute path being matched against the prefixes
		"pathbuf": {Name: "tc_pathbuf", Type: ebpf.PerCPUArray, KeySize: 4, ValueSize: pathBufSize, MaxEntries: 1},
		// {kind, code, dev, bucket} -> count
		"hist": {Name: "tc_hist", Type: ebpf.Hash, KeySize: 16, ValueSize: 8, MaxEntries: 1 << 16},
	}
}
