package report

import (
	"fmt"
	"sort"
	"strings"
	"unicode/utf8"
)

// Class groups ops whose latencies are worth comparing together: a read
// and a lookup differ by orders of magnitude and by what encryption does
// to them (content versus names).
type Class string

const (
	// ClassData moves or syncs file content: the cipher's own cost.
	ClassData Class = "data"
	// ClassMetadata reads or changes attributes of existing names.
	ClassMetadata Class = "metadata"
	// ClassNamespace creates, removes or renames names: name encryption
	// plus a directory update in the lower filesystem.
	ClassNamespace Class = "namespace"
	// ClassOther is any op not listed below (a newer op name, say).
	ClassOther Class = "other"
)

// Classes lists the classes in display order.
var Classes = []Class{ClassData, ClassMetadata, ClassNamespace, ClassOther}

// opClasses maps the op names of measure.Op.String to their class.
var opClasses = map[string]Class{
	"read": ClassData, "write": ClassData, "flush": ClassData, "fsync": ClassData,
	"fallocate": ClassData, "lseek": ClassData,

	"lookup": ClassMetadata, "getattr": ClassMetadata, "setattr": ClassMetadata,
	"access": ClassMetadata, "open": ClassMetadata, "release": ClassMetadata,
	"opendir": ClassMetadata, "readdir": ClassMetadata, "statfs": ClassMetadata,
	"readlink": ClassMetadata, "getxattr": ClassMetadata, "setxattr": ClassMetadata,
	"listxattr": ClassMetadata, "removexattr": ClassMetadata, "ioctl": ClassMetadata,

	"create": ClassNamespace, "mkdir": ClassNamespace, "rmdir": ClassNamespace,
	"unlink": ClassNamespace, "rename": ClassNamespace, "symlink": ClassNamespace,
	"link": ClassNamespace, "mknod": ClassNamespace,
}

// ClassOf returns the class of the op named op.
func ClassOf(op string) Class {
	if c, ok := opClasses[op]; ok {
		return c
	}
	return ClassOther
}

// classMeaning says in a few words what a class's ops do, for the notes
// of the charts and the commands' help.
var classMeaning = map[Class]string{
	ClassData:      "move or sync file content (the cipher's own cost)",
	ClassMetadata:  "read or change what an existing name carries (attributes, xattrs, listings)",
	ClassNamespace: "create, remove or rename names (name encryption plus a lower directory update)",
	ClassOther:     "any op not listed above",
}

// ClassOps returns the ops of class c in a stable order.
func ClassOps(c Class) []string {
	var ops []string
	for op, k := range opClasses {
		if k == c {
			ops = append(ops, op)
		}
	}
	sort.Strings(ops)
	return ops
}

// ClassDefinitions returns one paragraph per class: its name, what its
// ops do, and the ops, as the charts and the help define them.
func ClassDefinitions() []string {
	var out []string
	for _, c := range Classes {
		s := fmt.Sprintf("%s: %s", c, classMeaning[c])
		if ops := ClassOps(c); len(ops) > 0 {
			s += ": " + strings.Join(ops, ", ")
		}
		out = append(out, s+".")
	}
	return out
}

// ClassNotes returns ClassDefinitions wrapped into short lines for a
// chart's side panel, under an "Op classes" heading.
func ClassNotes() []string {
	lines := []string{"Op classes:"}
	for _, d := range ClassDefinitions() {
		lines = append(lines, wrap(d, 44)...)
	}
	return lines
}

// wrap breaks s into lines of at most width runes at spaces; the lines
// after the first are indented by two spaces.
func wrap(s string, width int) []string {
	var lines []string
	cur := ""
	for _, w := range strings.Fields(s) {
		if cur != "" && utf8.RuneCountInString(cur)+1+utf8.RuneCountInString(w) > width {
			lines = append(lines, cur)
			cur = "  "
		}
		if cur != "" && cur != "  " {
			cur += " "
		}
		cur += w
	}
	if cur != "" && cur != "  " {
		lines = append(lines, cur)
	}
	return lines
}
