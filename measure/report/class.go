package report

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
	"listxattr": ClassMetadata, "removexattr": ClassMetadata,

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
