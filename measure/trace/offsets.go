//go:build linux

package trace

import (
	"errors"
	"fmt"
	"strings"

	"github.com/cilium/ebpf/btf"
)

// offsets are the kernel structure fields the programs read, found by name
// in the running kernel's BTF when the tracer starts. This is the CO-RE
// idea done by hand: the programs are assembled after the offsets are
// known, so one binary follows any kernel's layout and no compiler is
// needed at build or run time.
type offsets struct {
	// struct fuse_req: the fields fuse:fuse_request_send/end print
	// (fs/fuse/fuse_trace.h: connection = req->fm->fc->dev,
	// unique = req->in.h.unique, opcode = req->in.h.opcode,
	// error = req->out.h.error).
	reqFm, fmFc, fcDev, reqUnique, reqOpcode, reqError int32
	// The descriptor walk: current->files->fdt->fd[n]->f_inode->i_sb->s_dev.
	taskFiles, filesFdt, fdtMaxFds, fdtFd, fileInode, inodeSb, sbDev int32
	// The working directory's device: current->fs->pwd.dentry->d_sb.
	taskFs, fsPwd, pathDentry, dentrySb int32
	// struct pt_regs: a system call's arguments (x86-64: rdi, rsi, rdx,
	// r10, r8, r9).
	regsArg [6]int32
	// struct task_struct: tgid, for the fork that adds a child.
	taskTgid int32
	// Block: the dev block:block_rq_issue prints,
	// disk_devt(rq->q->disk) = MKDEV(disk->major, disk->first_minor), and
	// the operation, rq->cmd_flags & REQ_OP_MASK.
	rqQ, qDisk, diskMajor, diskFirstMinor, rqCmdFlags int32
}

// loadOffsets reads the offsets from the kernel's BTF.
func loadOffsets(spec *btf.Spec) (offsets, error) {
	var o offsets
	var errs []error
	f := func(dst *int32, structName, path string) {
		off, err := fieldOffset(spec, structName, path)
		if err != nil {
			errs = append(errs, err)
		}
		*dst = off
	}
	f(&o.reqFm, "fuse_req", "fm")
	f(&o.fmFc, "fuse_mount", "fc")
	f(&o.fcDev, "fuse_conn", "dev")
	f(&o.reqUnique, "fuse_req", "in.h.unique")
	f(&o.reqOpcode, "fuse_req", "in.h.opcode")
	f(&o.reqError, "fuse_req", "out.h.error")
	f(&o.taskFiles, "task_struct", "files")
	f(&o.filesFdt, "files_struct", "fdt")
	f(&o.fdtMaxFds, "fdtable", "max_fds")
	f(&o.fdtFd, "fdtable", "fd")
	f(&o.fileInode, "file", "f_inode")
	f(&o.inodeSb, "inode", "i_sb")
	f(&o.sbDev, "super_block", "s_dev")
	f(&o.taskFs, "task_struct", "fs")
	f(&o.fsPwd, "fs_struct", "pwd")
	f(&o.pathDentry, "path", "dentry")
	f(&o.dentrySb, "dentry", "d_sb")
	for i, r := range []string{"di", "si", "dx", "r10", "r8", "r9"} {
		f(&o.regsArg[i], "pt_regs", r)
	}
	f(&o.taskTgid, "task_struct", "tgid")
	f(&o.rqQ, "request", "q")
	f(&o.qDisk, "request_queue", "disk")
	f(&o.diskMajor, "gendisk", "major")
	f(&o.diskFirstMinor, "gendisk", "first_minor")
	f(&o.rqCmdFlags, "request", "cmd_flags")
	return o, errors.Join(errs...)
}

// fieldOffset is the byte offset of a dotted field path in a struct,
// looking through anonymous structs and unions as C does.
func fieldOffset(spec *btf.Spec, structName, path string) (int32, error) {
	var st *btf.Struct
	if err := spec.TypeByName(structName, &st); err != nil {
		return 0, fmt.Errorf("struct %s: %w", structName, err)
	}
	var typ btf.Type = st
	var off btf.Bits
	for _, name := range strings.Split(path, ".") {
		members, ok := composite(typ)
		if !ok {
			return 0, fmt.Errorf("%s.%s: %s is not a struct", structName, path, name)
		}
		m, at, ok := findMember(members, name)
		if !ok {
			return 0, fmt.Errorf("%s has no field %s", structName, path)
		}
		if m.BitfieldSize != 0 {
			return 0, fmt.Errorf("%s.%s is a bit field", structName, path)
		}
		off += at
		typ = m.Type
	}
	return int32(off / 8), nil
}

func composite(t btf.Type) ([]btf.Member, bool) {
	switch u := btf.UnderlyingType(t).(type) {
	case *btf.Struct:
		return u.Members, true
	case *btf.Union:
		return u.Members, true
	}
	return nil, false
}

// findMember finds name among members, descending into anonymous ones;
// at is its offset from the start of members' container.
func findMember(members []btf.Member, name string) (btf.Member, btf.Bits, bool) {
	for _, m := range members {
		if m.Name == name {
			return m, m.Offset, true
		}
	}
	for _, m := range members {
		if m.Name != "" {
			continue
		}
		if inner, ok := composite(m.Type); ok {
			if found, at, ok := findMember(inner, name); ok {
				return found, m.Offset + at, true
			}
		}
	}
	return btf.Member{}, 0, false
}
