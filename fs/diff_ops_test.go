package fs

// The differential tester's ops that need more than one system call:
// SEEK_DATA/SEEK_HOLE walks, chains of directories deeper than PATH_MAX,
// ops of another caller (uid, umask) made by the helper process, and
// POSIX ACL values for the system.posix_acl_* attributes.

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"runtime"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// span is a byte range [lo, hi) of a file.
type span struct{ lo, hi int64 }

// diffSeekWalk asks fd for SEEK_DATA and SEEK_HOLE at off, then walks its
// data regions from 0, and returns what must hold on any filesystem (the
// exact offsets may differ: a hole is only reported at the granularity of
// the filesystem's allocation, an encrypted extent here, a page or block
// natively) and the data regions found. The descriptor's position is put
// back.
func diffSeekWalk(fd int, off int64) (facts string, data []span) {
	if pos, err := unix.Seek(fd, 0, unix.SEEK_CUR); err == nil {
		defer unix.Seek(fd, pos, unix.SEEK_SET)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fmt.Sprintf("fstat errno %d", errnoOf(err)), nil
	}
	size := st.Size
	var b strings.Builder
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		// Directories: what lseek does there varies between native
		// filesystems (ext4 0, tmpfs EINVAL, FUSE ENXIO).
		return "not a file", nil
	}
	d, errD := unix.Seek(fd, off, unix.SEEK_DATA)
	h, errH := unix.Seek(fd, off, unix.SEEK_HOLE)
	switch {
	case off >= size:
		// Past the end (at the end too: Linux filesystems say ENXIO).
		fmt.Fprintf(&b, "at or past the end: SEEK_DATA errno %d, SEEK_HOLE errno %d; ", errnoOf(errD), errnoOf(errH))
	default:
		if errH != nil || h < off || h > size {
			fmt.Fprintf(&b, "SEEK_HOLE(%d) = %d errno %d, outside [off, size %d]; ", off, h, errnoOf(errH), size)
		}
		if errD != nil && errD != unix.ENXIO || errD == nil && (d < off || d >= size) {
			fmt.Fprintf(&b, "SEEK_DATA(%d) = %d errno %d, outside [off, size %d); ", off, d, errnoOf(errD), size)
		}
	}
	// The walk a sparse copy makes (cp, tar --sparse, rsync -S): it must
	// move forward at every step and end.
	cur := int64(0)
	for steps := 0; cur < size; steps++ {
		if steps > 1<<16 {
			fmt.Fprintf(&b, "the walk does not end: %d steps, at %d of %d; ", steps, cur, size)
			break
		}
		d, err := unix.Seek(fd, cur, unix.SEEK_DATA)
		if err == unix.ENXIO {
			break
		}
		if err != nil || d < cur || d >= size {
			fmt.Fprintf(&b, "walk: SEEK_DATA(%d) = %d errno %d (size %d); ", cur, d, errnoOf(err), size)
			break
		}
		h, err := unix.Seek(fd, d, unix.SEEK_HOLE)
		if err != nil || h <= d || h > size {
			fmt.Fprintf(&b, "walk: SEEK_HOLE(%d) = %d errno %d (size %d): no progress; ", d, h, errnoOf(err), size)
			break
		}
		data = append(data, span{d, h})
		cur = h
	}
	if b.Len() == 0 {
		b.WriteString("ok")
	}
	return b.String(), data
}

// holesHideData checks a mount's SEEK_DATA walk against the reference's:
// wherever the mount reports a hole and the reference has data, the
// mount's bytes must read as zero (a sparse copy skips them). fd is the
// mount's descriptor, readable or not.
func holesHideData(fd int, readable bool, size int64, data, refData []span) string {
	var holes []span
	cur := int64(0)
	for _, s := range append(data, span{size, size}) {
		if s.lo > cur {
			holes = append(holes, span{cur, s.lo})
		}
		cur = s.hi
	}
	rfd := fd
	if !readable {
		// A write-only slot: read through a new descriptor. Reopening
		// an unlinked file fails on a FUSE mount (the daemon cannot
		// find it by its node): nothing to check then.
		var err error
		if rfd, err = unix.Open(fmt.Sprintf("/proc/self/fd/%d", fd), unix.O_RDONLY|unix.O_CLOEXEC, 0); err != nil {
			return ""
		}
		defer unix.Close(rfd)
	}
	budget := int64(64 << 20)
	buf := make([]byte, 1<<20)
	for _, h := range holes {
		for _, r := range refData {
			lo, hi := max(h.lo, r.lo), min(h.hi, r.hi)
			for off := lo; off < hi && budget > 0; off += int64(len(buf)) {
				n := int(min(int64(len(buf)), hi-off))
				budget -= int64(n)
				got, err := preadFull(rfd, buf[:n], off)
				if err != nil {
					return fmt.Sprintf("pread(%d, %d): %v", n, off, err)
				}
				if i := bytes.IndexFunc(buf[:got], func(r rune) bool { return r != 0 }); i >= 0 {
					return fmt.Sprintf("reported hole [%d, %d) holds data: byte %d is not zero", h.lo, h.hi, off+int64(i))
				}
			}
		}
	}
	return ""
}

// deepName is the name of every directory of a deep chain: 175 bytes,
// the longest that still encrypts to a name of its own (235 characters
// under LOWER, no sidecar), so that 18 levels pass 4096 bytes of lower
// path and 24 levels pass PATH_MAX of plaintext path.
func deepName(seed int64) string {
	return strings.Repeat(string(rune('A'+seed%26)), 175)
}

// diffDeepChain makes (or walks down) levels directories below dir, each
// level with mkdirat and openat from the descriptor of the one above, as
// a program walking a deep tree does (paths longer than PATH_MAX cannot be
// given whole). At the bottom it creates, writes, reads, links, renames
// and lists. It returns a transcript of every call's result.
func diffDeepChain(dir string, levels int, seed int64, dots bool) string {
	var b strings.Builder
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Sprintf("open errno %d", errnoOf(err))
	}
	defer func() { unix.Close(fd) }()
	name := deepName(seed)
	level := 0
	for ; level < levels; level++ {
		if err := unix.Mkdirat(fd, name, 0755); err != nil && err != unix.EEXIST {
			fmt.Fprintf(&b, "mkdirat level %d: errno %d; ", level, errnoOf(err))
		}
		nfd, err := unix.Openat(fd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			fmt.Fprintf(&b, "openat level %d: errno %d; ", level, errnoOf(err))
			break
		}
		unix.Close(fd)
		fd = nfd
	}
	fmt.Fprintf(&b, "reached level %d; ", level)
	step := func(what string, err error) { fmt.Fprintf(&b, "%s errno %d; ", what, errnoOf(err)) }
	f, err := unix.Openat(fd, "f", unix.O_CREAT|unix.O_RDWR|unix.O_TRUNC|unix.O_CLOEXEC, 0640)
	step("create", err)
	if err == nil {
		want := diffData(seed, 5000)
		n, err := unix.Pwrite(f, want, 0)
		step(fmt.Sprintf("pwrite %d", n), err)
		got := make([]byte, len(want))
		n, err = preadFull(f, got, 0)
		step(fmt.Sprintf("pread %d, same %v", n, bytes.Equal(got, want)), err)
		unix.Close(f)
	}
	var st unix.Stat_t
	err = unix.Fstatat(fd, "f", &st, unix.AT_SYMLINK_NOFOLLOW)
	step("fstatat "+statLine(&st), err)
	step("symlinkat", unix.Symlinkat("../"+name[:10], fd, "l"))
	buf := make([]byte, 256)
	n, err := unix.Readlinkat(fd, "l", buf)
	step(fmt.Sprintf("readlinkat %q", buf[:max(n, 0)]), err)
	step("linkat", unix.Linkat(fd, "f", fd, "h", 0))
	step("renameat", unix.Renameat(fd, "f", fd, "g"))
	step("unlinkat", unix.Unlinkat(fd, "h", 0))
	step("fchmodat", unix.Fchmodat(fd, "g", 0604, 0))
	step("mkdirat", unix.Mkdirat(fd, "sub", 0700))
	step("rmdir", unix.Unlinkat(fd, "sub", unix.AT_REMOVEDIR))
	// Listed through a descriptor opened now: btrfs lists through an
	// older one only the entries there at its open (docs/differences.md),
	// which is not what this step is about.
	lfd, err := unix.Openat(fd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		fmt.Fprintf(&b, "listing open errno %d", errnoOf(err))
		return b.String()
	}
	defer unix.Close(lfd)
	l, errno := listingFd(lfd, dots)
	fmt.Fprintf(&b, "listing errno %d: %s", errno, strings.ReplaceAll(string(l), "\n", ", "))
	return b.String()
}

func asString(o diffOp) string {
	p, p2 := goPath(o.path), goPath(o.path2)
	switch o.kind {
	case dAsCreate:
		return fmt.Sprintf("fd = open(%s, %s, %#o); pwrite(fd, data(%d, %d), %d); fstat(fd); close(fd)", p, openFlagString(o.flags), o.mode, o.seed, o.n, o.off)
	case dAsMkdir:
		return fmt.Sprintf("mkdir(%s, %#o)", p, o.mode)
	case dAsWrite:
		if o.flags == 1 {
			return fmt.Sprintf("fd = open(%s, O_WRONLY); ftruncate(fd, %d); fstat(fd); close(fd)", p, o.off)
		}
		return fmt.Sprintf("fd = open(%s, O_WRONLY); pwrite(fd, data(%d, %d), %d); fstat(fd); close(fd)", p, o.seed, o.n, o.off)
	case dAsChmod:
		return fmt.Sprintf("chmod(%s, %#o)", p, o.mode)
	case dAsUnlink:
		if o.flags == unix.AT_REMOVEDIR {
			return fmt.Sprintf("rmdir(%s)", p)
		}
		return fmt.Sprintf("unlink(%s)", p)
	case dAsRename:
		return fmt.Sprintf("renameat2(%s, %s, %s)", p, p2, renameFlagString(o.flags))
	case dAsSymlink:
		return fmt.Sprintf("symlink(%s, %s)", p2, p)
	case dAsFallocate:
		return fmt.Sprintf("fd = open(%s, O_WRONLY); fallocate(fd, %s, %d, %d); fstat(fd); close(fd)", p, fallocString(o.flags), o.off, o.n)
	}
	return "?"
}

// asRequest is one op for the helper process (TestDiffMmapHelper), as a
// JSON line after "AS\t".
type asRequest struct {
	Root        string // the mount (or plain directory) the paths are relative to
	Op          diffKind
	Path, Path2 string
	Mode, Uid   uint32
	Umask       uint32
	Flags       int
	Off, N      int64
	Seed        int64
}

// as asks the helper to run o as its caller on the mount at root.
func (h *mmapHelper) as(root string, o *diffOp) string {
	b, err := json.Marshal(asRequest{Root: root, Op: o.kind, Path: o.path, Path2: o.path2, Mode: o.mode,
		Uid: o.uid, Umask: o.umask, Flags: o.flags, Off: o.off, N: o.n, Seed: o.seed})
	if err != nil {
		return err.Error()
	}
	return h.request("AS\t" + string(b))
}

// asServe runs one request of as in the helper process. The thread that
// runs it takes the caller's identity for the filesystem only (fsuid,
// fsgid, no supplementary groups: capabilities over files are dropped
// with a non-zero fsuid) and is thrown away afterwards; the umask is the
// process's, which serves one request at a time.
func asServe(line string) string {
	var q asRequest
	if err := json.Unmarshal([]byte(line), &q); err != nil {
		return "bad request: " + err.Error()
	}
	done := make(chan string)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread exits with the goroutine
		done <- asRun(&q)
	}()
	return <-done
}

func asRun(q *asRequest) string {
	root, err := unix.Open(q.Root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Sprintf("open root: %v", err)
	}
	defer unix.Close(root)
	old := unix.Umask(int(q.Umask))
	defer unix.Umask(old)
	if q.Uid != 0 {
		// Raw system calls: this thread only.
		if _, _, e := unix.RawSyscall(unix.SYS_SETGROUPS, 0, 0, 0); e != 0 {
			return fmt.Sprintf("setgroups: %v", e)
		}
		unix.Setfsgid(int(q.Uid))
		unix.Setfsuid(int(q.Uid))
		if cur, _ := unix.SetfsuidRetUid(-1); cur != int(q.Uid) {
			return fmt.Sprintf("setfsuid %d: still %d", q.Uid, cur)
		}
	}
	var b strings.Builder
	errno := func(err error) syscall.Errno { return errnoOf(err) }
	fileOps := func(fd int) {
		if q.Op == dAsWrite && q.Flags == 1 {
			fmt.Fprintf(&b, " ftruncate errno %d", errno(unix.Ftruncate(fd, q.Off)))
		} else if q.N > 0 {
			n, err := unix.Pwrite(fd, diffData(q.Seed, q.N), q.Off)
			fmt.Fprintf(&b, " pwrite %d errno %d", n, errno(err))
		}
		var st unix.Stat_t
		err := unix.Fstat(fd, &st)
		fmt.Fprintf(&b, " fstat %s errno %d close errno %d", statLine(&st), errno(err), errno(unix.Close(fd)))
	}
	switch q.Op {
	case dAsCreate:
		fd, err := unix.Openat(root, q.Path, q.Flags|unix.O_CLOEXEC, q.Mode)
		fmt.Fprintf(&b, "open errno %d", errno(err))
		if err == nil {
			fileOps(fd)
		}
	case dAsWrite:
		fd, err := unix.Openat(root, q.Path, unix.O_WRONLY|unix.O_CLOEXEC, 0)
		fmt.Fprintf(&b, "open errno %d", errno(err))
		if err == nil {
			fileOps(fd)
		}
	case dAsFallocate:
		fd, err := unix.Openat(root, q.Path, unix.O_WRONLY|unix.O_CLOEXEC, 0)
		fmt.Fprintf(&b, "open errno %d", errno(err))
		if err == nil {
			fmt.Fprintf(&b, " fallocate errno %d", errno(unix.Fallocate(fd, uint32(q.Flags), q.Off, q.N)))
			q.N = 0 // no write after
			fileOps(fd)
		}
	case dAsMkdir:
		fmt.Fprintf(&b, "mkdir errno %d", errno(unix.Mkdirat(root, q.Path, q.Mode)))
	case dAsChmod:
		fmt.Fprintf(&b, "chmod errno %d", errno(unix.Fchmodat(root, q.Path, q.Mode, 0)))
	case dAsUnlink:
		fmt.Fprintf(&b, "unlink errno %d", errno(unix.Unlinkat(root, q.Path, q.Flags)))
	case dAsRename:
		fmt.Fprintf(&b, "rename errno %d", errno(unix.Renameat2(root, q.Path, root, q.Path2, uint(q.Flags))))
	case dAsSymlink:
		fmt.Fprintf(&b, "symlink errno %d", errno(unix.Symlinkat(q.Path2, root, q.Path)))
	default:
		return "unknown op"
	}
	return b.String()
}

// POSIX ACL xattr values (system.posix_acl_access and _default), as
// setfacl writes them: a version header, then (tag, perm, id) entries in
// tag order.
const (
	aclVersion  = 2
	aclUserObj  = 0x01
	aclUser     = 0x02
	aclGroupObj = 0x04
	aclGroup    = 0x08
	aclMask     = 0x10
	aclOther    = 0x20
	aclUndefID  = 0xffffffff
)

func aclEntry(b []byte, tag uint16, perm uint16, id uint32) []byte {
	b = binary.LittleEndian.AppendUint16(b, tag)
	b = binary.LittleEndian.AppendUint16(b, perm)
	return binary.LittleEndian.AppendUint32(b, id)
}

// aclValue is a valid ACL made from seed: the three base entries, and
// from some seeds named users and groups with their mask; seed%11 == 0
// gives a malformed value (EINVAL).
func aclValue(seed int64) []byte {
	x := uint64(seed)*0x9E3779B97F4A7C15 | 1
	perm := func() uint16 { x = x*6364136223846793005 + 1442695040888963407; return uint16(x>>61) & 7 }
	b := binary.LittleEndian.AppendUint32(nil, aclVersion)
	if seed%11 == 0 {
		return aclEntry(b, aclOther, 7, 42) // OTHER with an id, alone
	}
	b = aclEntry(b, aclUserObj, perm(), aclUndefID)
	extended := seed%3 != 0
	if extended {
		b = aclEntry(b, aclUser, perm(), 1000)
		if seed%2 == 0 {
			b = aclEntry(b, aclUser, perm(), 1001)
		}
	}
	b = aclEntry(b, aclGroupObj, perm(), aclUndefID)
	if extended {
		if seed%5 == 0 {
			b = aclEntry(b, aclGroup, perm(), 1000)
		}
		b = aclEntry(b, aclMask, perm(), aclUndefID)
	}
	return aclEntry(b, aclOther, perm(), aclUndefID)
}

// xattrValue is what a setxattr op writes: an ACL for the ACL names,
// data(seed, n) otherwise.
func xattrValue(name string, seed, n int64) []byte {
	if strings.HasPrefix(name, "system.posix_acl_") {
		return aclValue(seed)
	}
	return diffData(seed, n)
}
