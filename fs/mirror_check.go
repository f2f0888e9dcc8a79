package fs

import (
	"errors"
	"fmt"
	"sort"
	"strings"
	"syscall"
)

// ErrMirrorMismatch is returned by Mount in mirror mode when the mirror
// directory does not start as a copy of the mount's plaintext view.
var ErrMirrorMismatch = errors.New("the mirror directory does not match the volume")

// checkMirror refuses a mirror whose top level differs from the mount's.
// Mirror mode applies every operation to both sides and pairs their
// timings; it only means something when both sides start alike. Over a
// volume that already has files and an empty mirror, every operation on an
// old file fails on the twin (ENOENT) and is timed as such, and the ratios
// are nonsense; a mirror with files the volume lacks fails creates
// (EEXIST) the same way. Copying the whole plaintext tree would make the
// mount wait for as long as the volume is big, and would silently put
// plaintext of a possibly large volume on disk: that is left to the user
// (mount without --mirror, cp -a MNT/. TWINDIR/). The check compares the
// names and types of the top level only: it is cheap, and catches the
// mistakes people make (an empty or a wrong directory), not a copy edited
// behind the mount's back.
func (r *root) checkMirror() error {
	var a acct
	mainEntries, errno := r.main.readdir(&a, r.rootNode)
	if errno != 0 {
		return fmt.Errorf("mirror mode: list the volume's root: %w", errno)
	}
	twinEntries, errno := r.twin.readdir(&a, r.rootNode)
	if errno != 0 {
		return fmt.Errorf("mirror mode: list the mirror directory %s: %w", r.twin.lower, errno)
	}
	mainTypes, twinTypes := map[string]uint32{}, map[string]uint32{}
	for _, e := range mainEntries {
		if e.Name != "." && e.Name != ".." {
			mainTypes[e.Name] = e.Mode & syscall.S_IFMT
		}
	}
	for _, e := range twinEntries {
		if e.Name != "." && e.Name != ".." {
			twinTypes[e.Name] = e.Mode & syscall.S_IFMT
		}
	}
	onlyMain, onlyTwin := diffNames(mainTypes, twinTypes), diffNames(twinTypes, mainTypes)
	if len(onlyMain) == 0 && len(onlyTwin) == 0 {
		return nil
	}
	var what []string
	if len(onlyMain) > 0 {
		what = append(what, fmt.Sprintf("the volume has %s that the mirror lacks", listNames(onlyMain)))
	}
	if len(onlyTwin) > 0 {
		what = append(what, fmt.Sprintf("the mirror has %s that the volume lacks", listNames(onlyTwin)))
	}
	return fmt.Errorf("%w: %s; every operation on those would fail on the twin and its timings would mean nothing. "+
		"Use an empty mirror directory with an empty volume, or first copy the volume's plaintext into it "+
		"(mount without --mirror, then cp -a MNT/. %s/)", ErrMirrorMismatch, strings.Join(what, " and "), r.twin.lower)
}

// diffNames lists the names in a that b lacks or holds with another type,
// sorted.
func diffNames(a, b map[string]uint32) []string {
	var out []string
	for name, typ := range a {
		if t, ok := b[name]; !ok || t != typ {
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return out
}

// listNames quotes up to three names for a message.
func listNames(names []string) string {
	const show = 3
	q := make([]string, 0, show)
	for i, n := range names {
		if i == show {
			break
		}
		q = append(q, fmt.Sprintf("%q", n))
	}
	s := strings.Join(q, ", ")
	if len(names) > show {
		s += fmt.Sprintf(" and %d more", len(names)-show)
	}
	return s
}
