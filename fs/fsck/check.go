package fsck

import (
	"errors"
	"fmt"
	"os"
	"path"
	"sort"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/twincrypt/twincrypt/cipher/config"
	"github.com/twincrypt/twincrypt/cipher/content"
	"github.com/twincrypt/twincrypt/cipher/keys"
	"github.com/twincrypt/twincrypt/cipher/links"
	"github.com/twincrypt/twincrypt/cipher/names"
)

// scanUnits is how many extents one read covers while scanning a file.
const scanUnits = 256

// maxSidecar bounds what is read of a sidecar: the mount reads 4096 bytes,
// and nothing longer than names.MaxEncryptedName can be valid.
const maxSidecar = 4096

// maxLink is the longest symlink target read (PATH_MAX).
const maxLink = 4096

// checker holds the state of one Check.
type checker struct {
	root   *os.File
	names  *names.Cipher // nil with plaintext names
	seal   *keys.Sealer
	engine *content.Engine
	opts   Options
	rep    *Report
	buf    []byte // scan buffer

	// actions are the repairs, in the order their problems were found:
	// an entry before anything below it, so running them backwards
	// moves the contents of a directory before the directory itself.
	actions []*action
	lf      *lostFound // opened or created by the first move

	// linkIDs are the sidecar ids named by the long links seen.
	linkIDs map[string]bool
}

// action is one repair and the problems it settles.
type action struct {
	kind     Action
	dir      string // lower path of the parent directory, "" for LOWER
	name     string // lower name in dir ("" for NewDirIV: dir itself)
	plain    string // plaintext name, "" when unknown
	dev, ino uint64 // what the check saw, verified before repairing
	size     int64  // ZeroTrailer: the lower size the check saw
	problems []int  // indices into Report.Problems
}

// entry is a lower directory entry being checked.
type entry struct {
	dir      string // lower path of the parent, "" for LOWER
	name     string // lower name
	rel      string // lower path
	plain    string // path in the mounted view, "" if unknown
	plainNm  string // plaintext name, "" if unknown
	st       unix.Stat_t
	inLF     bool     // below lost+found: damaged content is quarantined
	isRootLF bool     // this entry is lost+found itself
	move     *action  // this entry's MoveAside, once a problem asks for it
	checker  *checker // where problems go
}

// add records a problem about e; with move set, repairing it moves e aside.
func (e *entry) add(kind Kind, detail string, move bool) {
	p := Problem{Kind: kind, Lower: lowerPath(e.rel), Plain: e.plain, Detail: detail}
	e.addProblem(p, move)
}

func (e *entry) addProblem(p Problem, move bool) {
	c := e.checker
	if e.inLF && move && isContentKind(p.Kind) {
		p.Quarantined = true
		c.rep.Problems = append(c.rep.Problems, p)
		return
	}
	if move {
		p.Action = MoveAside
	}
	c.rep.Problems = append(c.rep.Problems, p)
	if !move {
		return
	}
	if e.move == nil {
		e.move = &action{kind: MoveAside, dir: e.dir, name: e.name, plain: e.plainNm,
			dev: uint64(e.st.Dev), ino: uint64(e.st.Ino)}
		c.actions = append(c.actions, e.move)
	}
	e.move.problems = append(e.move.problems, len(c.rep.Problems)-1)
}

// isContentKind reports the kinds that are about what an entry holds (as
// opposed to how it is named); those are quarantined inside lost+found.
func isContentKind(k Kind) bool {
	switch k {
	case TornSize, BadMagic, BadHeader, CipherMismatch, ReadError, TornExtent, SymlinkUnreadable, LinkSidecarMissing, XattrUnreadable:
		return true
	}
	return false
}

// problem records a problem that is not about one entry's content (IVs,
// orphans, leftovers) with an optional action.
func (c *checker) problem(p Problem, a *action) {
	if a != nil {
		p.Action = a.kind
		a.problems = append(a.problems, len(c.rep.Problems))
		c.actions = append(c.actions, a)
	}
	c.rep.Problems = append(c.rep.Problems, p)
}

func lowerPath(rel string) string {
	if rel == "" {
		return "."
	}
	return rel
}

func joinRel(dir, name string) string {
	if dir == "" {
		return name
	}
	return dir + "/" + name
}

// walkDir checks the directory d (lower path rel, plaintext path plain or
// "" if unknown) and everything below it.
func (c *checker) walkDir(d *os.File, rel, plain string, isRoot, inLF bool) {
	dfd := int(d.Fd())
	list, err := d.Readdirnames(-1)
	if err != nil {
		c.problem(Problem{Kind: LowerError, Lower: lowerPath(rel), Plain: plain,
			Detail: fmt.Sprintf("listing the directory: %v (entries after the error were not checked)", err)}, nil)
	}
	sort.Strings(list)
	present := make(map[string]bool, len(list))
	for _, n := range list {
		present[n] = true
	}

	var iv []byte
	if c.names != nil {
		iv = c.checkDirIV(dfd, rel, plain, list)
	}
	for _, name := range list {
		if isRoot && config.IsReserved(name) {
			if name != config.FileName {
				c.configLeftover(dfd, name)
			}
			continue
		}
		if isRoot && name == links.StoreDir {
			continue // checked by checkLinkStore, after the walk
		}
		if c.names != nil {
			if name == names.DirIVFile || names.IsTmp(name) {
				continue // an IV, or metadata being written (or left by a crash)
			}
			if names.IsSidecar(name) {
				if !present[strings.TrimSuffix(name, names.LongSuffix)] {
					c.orphanSidecar(dfd, rel, plain, name)
				}
				continue
			}
		}
		c.checkEntry(dfd, rel, plain, name, iv, present, isRoot, inLF)
	}
}

// checkDirIV checks the IV file of the directory dfd and returns the IV,
// nil when it is unusable.
func (c *checker) checkDirIV(dfd int, rel, plain string, list []string) []byte {
	p := Problem{Lower: lowerPath(rel), Plain: plain}
	// Only an empty directory can get a new IV: nothing in it was named
	// under the old one (the mount does the same). The temporary file of
	// an interrupted IV or sidecar write names nothing: a crash between
	// mkdir's IV write and its rename leaves one (crashsim untar-sync).
	empty := true
	for _, n := range list {
		if n != names.DirIVFile && !names.IsTmp(n) {
			empty = false
		}
	}
	var a *action
	if empty {
		var st unix.Stat_t
		if err := unix.Fstat(dfd, &st); err == nil {
			a = &action{kind: NewDirIV, dir: rel, dev: uint64(st.Dev), ino: uint64(st.Ino)}
		}
	}
	iv, err := readSmall(dfd, names.DirIVFile, names.DirIVSize+1)
	switch {
	case errors.Is(err, unix.ENOENT):
		p.Kind = DirIVMissing
		p.Detail = names.DirIVFile + " is missing: the names in this directory cannot be decrypted"
	case err != nil:
		p.Kind = DirIVDamaged
		p.Detail = fmt.Sprintf("%s: %v", names.DirIVFile, err)
	case len(iv) != names.DirIVSize:
		p.Kind = DirIVDamaged
		p.Detail = fmt.Sprintf("%s holds %d bytes, want %d", names.DirIVFile, len(iv), names.DirIVSize)
	default:
		return iv
	}
	if a == nil {
		p.Note = "not repairable: the directory is not empty and its entries are named under this IV; restore " +
			names.DirIVFile + " from a backup if there is one"
	}
	c.problem(p, a)
	return nil
}

// configLeftover reports a config backup or temporary file in the root.
// After the config unlocked, neither holds anything the volume needs; a
// backup is even unlocked by a passphrase that was changed.
func (c *checker) configLeftover(dfd int, name string) {
	var st unix.Stat_t
	if err := unix.Fstatat(dfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return
	}
	p := Problem{Kind: ConfigLeftover, Lower: name,
		Detail: "left by an interrupted config write (passwd); " + config.FileName + " itself unlocked"}
	if name == config.BackupName {
		p.Detail += "; the backup may still open with the previous passphrase"
	}
	var a *action
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		a = &action{kind: Delete, name: name, dev: uint64(st.Dev), ino: uint64(st.Ino)}
	} else {
		p.Note = "a directory: not deleted"
	}
	c.problem(p, a)
}

// orphanSidecar reports a sidecar whose entry does not exist.
func (c *checker) orphanSidecar(dfd int, rel, plain, name string) {
	var st unix.Stat_t
	if err := unix.Fstatat(dfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return
	}
	p := Problem{Kind: SidecarOrphaned, Lower: joinRel(rel, name),
		Detail: "long-name sidecar without its entry (an interrupted create or unlink)"}
	var a *action
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		a = &action{kind: Delete, dir: rel, name: name, dev: uint64(st.Dev), ino: uint64(st.Ino)}
	} else {
		p.Note = "a directory: not deleted"
	}
	c.problem(p, a)
}

// checkEntry checks one entry of the directory dfd: its name, then what
// it is.
func (c *checker) checkEntry(dfd int, dir, dirPlain, name string, iv []byte, present map[string]bool, isRoot, inLF bool) {
	e := &entry{dir: dir, name: name, rel: joinRel(dir, name), inLF: inLF, checker: c}
	if err := unix.Fstatat(dfd, name, &e.st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		if !errors.Is(err, unix.ENOENT) {
			e.add(LowerError, fmt.Sprintf("stat: %v", err), false)
		}
		return
	}
	typ := e.st.Mode & unix.S_IFMT

	switch {
	case c.names == nil:
		e.plainNm = name
	case iv == nil:
		// The directory's IV is reported already; its names are lost.
	default:
		e.plainNm = c.decodeName(e, dfd, iv, present)
	}
	if dirPlain != "" && e.plainNm != "" {
		e.plain = path.Join(dirPlain, e.plainNm)
	}
	if isRoot && e.plainNm == LostFound && typ == unix.S_IFDIR {
		e.isRootLF = true
	}

	switch typ {
	case unix.S_IFREG:
		c.rep.Files++
		c.checkFile(e, dfd)
	case unix.S_IFDIR:
		c.rep.Dirs++
		c.checkDir(e, dfd)
	case unix.S_IFLNK:
		c.rep.Symlinks++
		c.checkLink(e, dfd)
	default:
		// FIFOs, sockets and devices carry nothing encrypted but their name.
		c.rep.Other++
	}
}

// decodeName returns the plaintext name of e, or "" after reporting why
// there is none.
func (c *checker) decodeName(e *entry, dfd int, iv []byte, present map[string]bool) string {
	cName := e.name
	if names.IsLong(e.name) {
		side := names.Sidecar(e.name)
		if !present[side] {
			e.add(SidecarMissing, "long-name entry without its sidecar "+side+"; the mount hides it", true)
			return ""
		}
		b, err := readSmall(dfd, side, maxSidecar+1)
		switch {
		case err != nil:
			e.add(SidecarDamaged, fmt.Sprintf("sidecar %s: %v; the mount hides the entry", side, err), true)
			return ""
		case len(b) > maxSidecar:
			e.add(SidecarDamaged, fmt.Sprintf("sidecar %s is longer than %d bytes; the mount hides the entry", side, maxSidecar), true)
			return ""
		}
		if cName, err = names.LongName(e.name, b); err != nil {
			e.add(SidecarMismatch, "the name in sidecar "+side+" does not hash to its entry; the mount hides the entry", true)
			return ""
		}
	}
	plain, err := c.names.Decrypt(cName, iv)
	if err != nil {
		what := "name"
		if cName != e.name {
			what = "name in the sidecar"
		}
		e.add(NameUndecryptable, "the "+what+" does not decrypt under this directory's IV; the mount hides the entry", true)
		return ""
	}
	return plain
}

// checkDir checks a subdirectory's xattrs and walks it.
func (c *checker) checkDir(e *entry, dfd int) {
	d, err := openAt(dfd, e.name, unix.O_DIRECTORY, &e.st)
	if err != nil {
		if !errors.Is(err, errChanged) {
			e.add(LowerError, fmt.Sprintf("open directory: %v", err), false)
		}
		return
	}
	defer d.Close()
	c.checkXattrs(e, int(d.Fd()))
	c.walkDir(d, e.rel, e.plain, false, e.inLF || e.isRootLF)
}

// checkLink checks that a symlink target opens: sealed in the link, or
// in the sidecar of a long link.
func (c *checker) checkLink(e *entry, dfd int) {
	buf := make([]byte, maxLink+1)
	n, err := unix.Readlinkat(dfd, e.name, buf)
	if err != nil {
		if !errors.Is(err, unix.ENOENT) {
			e.add(LowerError, fmt.Sprintf("readlink: %v", err), false)
		}
		return
	}
	if n > maxLink {
		e.add(SymlinkUnreadable, "target is longer than any sealed target", true)
		return
	}
	lower := string(buf[:n])
	if _, id, ok := links.ParseMarker(lower); ok {
		c.checkLongLink(e, lower, id)
		return
	}
	if _, err := links.Open(c.seal, buf[:n]); err != nil {
		if errors.Is(err, links.ErrEncoding) {
			e.add(SymlinkUnreadable, "target is not base64url, so not a sealed target", true)
			return
		}
		e.add(SymlinkUnreadable, "sealed target does not authenticate (AES-GCM)", true)
	}
}

// checkLongLink checks the sidecar of the long link e (marker, id).
func (c *checker) checkLongLink(e *entry, marker, id string) {
	if c.linkIDs == nil {
		c.linkIDs = make(map[string]bool)
	}
	c.linkIDs[id] = true
	side := links.Sidecar(id)
	store, err := c.openDirRel(links.StoreDir)
	var b []byte
	if err == nil {
		b, err = readSmall(int(store.Fd()), id, links.MaxSidecar+1)
		store.Close()
	}
	switch {
	case errors.Is(err, unix.ENOENT):
		e.add(LinkSidecarMissing, "long symlink whose sidecar "+side+" is missing; readlink gives EIO", true)
	case err != nil:
		e.add(SymlinkUnreadable, fmt.Sprintf("long symlink sidecar %s: %v", side, err), true)
	default:
		if _, err := links.OpenLong(c.seal, marker, b); err != nil {
			e.add(SymlinkUnreadable, fmt.Sprintf("long symlink sidecar %s: %v", side, err), true)
		}
	}
}

// checkLinkStore reports the entries of the long-link store that no long
// link names (an unlink interrupted between its two steps, a sidecar left
// by an older twincrypt's unlink).
func (c *checker) checkLinkStore() {
	store, err := c.openDirRel(links.StoreDir)
	if errors.Is(err, unix.ENOENT) {
		return
	}
	if err != nil {
		c.problem(Problem{Kind: LowerError, Lower: links.StoreDir, Detail: fmt.Sprintf("open the long-link store: %v", err)}, nil)
		return
	}
	defer store.Close()
	list, err := store.Readdirnames(-1)
	if err != nil {
		c.problem(Problem{Kind: LowerError, Lower: links.StoreDir, Detail: fmt.Sprintf("listing the long-link store: %v", err)}, nil)
	}
	sort.Strings(list)
	for _, name := range list {
		if c.linkIDs[name] {
			continue
		}
		var st unix.Stat_t
		if err := unix.Fstatat(int(store.Fd()), name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			continue
		}
		p := Problem{Kind: LinkSidecarOrphaned, Lower: links.StoreDir + "/" + name,
			Detail: "long-symlink sidecar that no symlink names (an interrupted symlink or unlink)"}
		var a *action
		typ := st.Mode & unix.S_IFMT
		switch {
		case links.IsID(name) && typ == unix.S_IFREG && st.Size <= links.MaxSidecar:
			a = &action{kind: Delete, dir: links.StoreDir, name: name, dev: uint64(st.Dev), ino: uint64(st.Ino)}
		case names.IsTmp(name) && (typ == unix.S_IFREG || typ == unix.S_IFLNK):
			// A sidecar being written, or the symlink that measures
			// the longest target LOWER takes, left by a crash.
			p.Detail = "temporary file of an interrupted long-symlink write"
			a = &action{kind: Delete, dir: links.StoreDir, name: name, dev: uint64(st.Dev), ino: uint64(st.Ino)}
		default:
			// Not something the mount wrote: a plaintext-names volume
			// may have had a directory of this name before long links.
			p.Note = "not a long-link sidecar (name, type or size): not deleted"
		}
		c.problem(p, a)
	}
}

// checkXattrs checks that every user.* value of the open file fd opens.
// Other namespaces belong to the lower filesystem and are not ours.
func (c *checker) checkXattrs(e *entry, fd int) {
	list, err := xattrList(fd)
	if err != nil {
		if !errors.Is(err, unix.ENOTSUP) {
			e.add(LowerError, fmt.Sprintf("listxattr: %v", err), false)
		}
		return
	}
	for _, attr := range list {
		if !strings.HasPrefix(attr, "user.") {
			continue
		}
		v, err := xattrGet(fd, attr)
		if err != nil {
			if !errors.Is(err, unix.ENODATA) {
				e.addProblem(Problem{Kind: LowerError, Lower: lowerPath(e.rel), Plain: e.plain, Xattr: attr,
					Detail: fmt.Sprintf("getxattr: %v", err)}, false)
			}
			continue
		}
		if _, err := c.seal.Open(v, []byte("xattr "+attr)); err != nil {
			p := Problem{Kind: XattrUnreadable, Lower: lowerPath(e.rel), Plain: e.plain, Xattr: attr,
				Detail: "value does not authenticate (AES-GCM); getxattr through the mount gives EIO"}
			p.Note = "not repaired: that would lose the value; if it is not needed, remove it through the mount: setfattr -x " + attr
			if e.plain != "" {
				p.Note += " MNT" + e.plain
			}
			if e.inLF {
				p.Quarantined = true
			}
			c.rep.Problems = append(c.rep.Problems, p)
		}
	}
}

// checkFile checks a regular file: size, header, cipher, units, xattrs.
func (c *checker) checkFile(e *entry, dfd int) {
	f, err := openAt(dfd, e.name, unix.O_NOATIME, &e.st)
	if errors.Is(err, unix.EPERM) {
		// O_NOATIME needs ownership or CAP_FOWNER.
		f, err = openAt(dfd, e.name, 0, &e.st)
	}
	if err != nil {
		if !errors.Is(err, errChanged) {
			e.add(LowerError, fmt.Sprintf("open: %v", err), false)
		}
		return
	}
	defer f.Close()
	fd := int(f.Fd())
	c.checkXattrs(e, fd)

	lowerSize := e.st.Size
	plainSize, err := content.PlainSize(lowerSize)
	if err != nil {
		e.add(TornSize, fmt.Sprintf("lower size %d encodes no plaintext size (valid: 0, %d, or at least %d)",
			lowerSize, content.HeaderSize, content.HeaderSize+content.TrailerSize), true)
		return
	}
	if lowerSize == 0 {
		return
	}
	var hb [content.HeaderSize]byte
	if n, err := preadFull(fd, hb[:], 0); err != nil || n != len(hb) {
		e.add(ReadError, fmt.Sprintf("reading the header: %d of %d bytes, %v", n, len(hb), err), true)
		return
	}
	hdr, err := content.ParseHeader(hb[:])
	switch {
	case errors.Is(err, content.ErrNotOurs):
		detail := fmt.Sprintf("header starts with % x, not %q", hb[:4], content.Magic[:])
		if content.IsZero(hb[:]) {
			detail = "header is all zeros (it never reached the disk?)"
		}
		e.add(BadMagic, detail, true)
		return
	case err != nil:
		e.add(BadHeader, err.Error(), true)
		return
	}
	if _, err := c.engine.FileCipher(&hdr); err != nil {
		e.add(CipherMismatch, err.Error(), true)
		return
	}
	c.rep.PlainBytes += plainSize
	if !c.opts.Quick {
		c.scanFile(e, fd, plainSize)
	}
}

// scanFile reads every stored unit of a file of plainSize bytes. Holes in
// the lower file are skipped with SEEK_DATA where the filesystem has it:
// they read as zeros, which is a hole in the format too.
func (c *checker) scanFile(e *entry, fd int, plainSize int64) {
	last := plainSize / content.ExtentSize
	var torn []int64
	staleTrailer := false
	for ext := int64(0); ext <= last; {
		off := content.UnitOffset(ext)
		data, err := unix.Seek(fd, off, unix.SEEK_DATA)
		if errors.Is(err, unix.ENXIO) {
			break // only a hole follows
		}
		if err == nil && data > off {
			if next := (data - content.HeaderSize) / content.ExtentSize; next > ext {
				ext = next
				continue
			}
		}
		n := min(int64(scanUnits), last-ext+1)
		length := int((n-1)*content.ExtentSize) + content.UnitSize(ext+n-1, plainSize)
		got, err := preadFull(fd, c.buf[:length], off)
		if err != nil || got != length {
			what := fmt.Sprintf("short read (%d of %d bytes)", got, length)
			if err != nil {
				what = err.Error()
			}
			e.add(ReadError, fmt.Sprintf("extents %d to %d: %s", ext, ext+n-1, what), true)
			return
		}
		for i := int64(0); i < n; i++ {
			u := c.buf[i*content.ExtentSize:]
			u = u[:content.UnitSize(ext+i, plainSize)]
			if partlyZero(u) {
				torn = append(torn, ext+i)
			}
			if ext+i == last && len(u) == content.TrailerSize && !content.IsZero(u) {
				staleTrailer = true
			}
		}
		ext += n
	}
	if len(torn) > 0 {
		detail := fmt.Sprintf("extent %d is partly zeros: torn by a crash (a real ciphertext block is zero with probability 2^-128); it reads as garbage", torn[0])
		if len(torn) > 1 {
			detail += fmt.Sprintf("; %d more extents like it", len(torn)-1)
		}
		e.add(TornExtent, detail, true)
	}
	if staleTrailer {
		// After any move of the same file, so that the repair, which runs
		// the actions backwards, zeroes it before it moves.
		c.problem(Problem{Kind: StaleTrailer, Lower: lowerPath(e.rel), Plain: e.plain,
			Detail: "the file ends on an extent boundary and its tail unit, the trailer alone, is not 16 zero bytes: " +
				"harmless to reads, but a master-key check (init/passwd/mount --masterkey) cannot use it"},
			&action{kind: ZeroTrailer, dir: e.dir, name: e.name, plain: e.plainNm,
				dev: uint64(e.st.Dev), ino: uint64(e.st.Ino), size: e.st.Size})
	}
}

// partlyZero reports whether a stored unit that is not a hole has an
// all-zero 16-byte block. Only whole blocks count: the last partial block
// of a tail unit can be zero by chance.
func partlyZero(u []byte) bool {
	if content.IsZero(u) {
		return false
	}
	for i := 0; i+16 <= len(u); i += 16 {
		if content.IsZero(u[i : i+16]) {
			return true
		}
	}
	return false
}
