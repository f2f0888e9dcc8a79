package fsck

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"

	"github.com/twincrypt/twincrypt/cipher/config"
	"github.com/twincrypt/twincrypt/cipher/content"
	"github.com/twincrypt/twincrypt/cipher/links"
	"github.com/twincrypt/twincrypt/cipher/names"
)

// Census counts what a lower directory holds, without any key: what
// "twincrypt info" shows. Like Check it follows no symlink.
type Census struct {
	// Entries of the mounted view (LOWER itself is not counted).
	Dirs     int64 `json:"dirs"`
	Files    int64 `json:"files"`
	Symlinks int64 `json:"symlinks"`
	Other    int64 `json:"other"`
	// PlainBytes is the sum of the plaintext sizes of the files with a
	// valid lower size; LowerBytes the sum of their lower sizes;
	// AllocatedBytes what the lower filesystem has allocated for them.
	PlainBytes     int64 `json:"plain_bytes"`
	LowerBytes     int64 `json:"lower_bytes"`
	AllocatedBytes int64 `json:"allocated_bytes"`
	// TornFiles have a lower size that encodes no plaintext size.
	TornFiles int64 `json:"torn_files"`
	// Metadata the mount hides: directory IVs and long-name sidecars.
	DirIVs   int64 `json:"dir_ivs"`
	Sidecars int64 `json:"sidecars"`
	// LinkSidecars are the files in twincrypt.links: long symlink targets.
	LinkSidecars int64 `json:"link_sidecars"`
	// ConfigLeftovers are twincrypt.conf.bak and temporary config files.
	ConfigLeftovers int64 `json:"config_leftovers"`
	// Unreadable counts directories that could not be listed.
	Unreadable int64 `json:"unreadable"`
}

// Count walks lower and counts its entries. plaintextNames says whether
// .twincrypt.diriv and .name sidecars are metadata (encrypted names) or
// ordinary files.
func Count(lower string, plaintextNames bool) (*Census, error) {
	root, err := openRoot(lower)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", lower, err)
	}
	defer root.Close()
	c := &Census{}
	c.walk(root, true, plaintextNames)
	return c, nil
}

func (c *Census) walk(d *os.File, isRoot, plaintextNames bool) {
	dfd := int(d.Fd())
	list, err := d.Readdirnames(-1)
	if err != nil {
		c.Unreadable++
	}
	for _, name := range list {
		if isRoot && config.IsReserved(name) {
			if name != config.FileName {
				c.ConfigLeftovers++
			}
			continue
		}
		if isRoot && name == links.StoreDir {
			if store, err := openAt(dfd, name, unix.O_DIRECTORY, nil); err == nil {
				ids, _ := store.Readdirnames(-1)
				c.LinkSidecars += int64(len(ids))
				store.Close()
			}
			continue
		}
		var st unix.Stat_t
		if err := unix.Fstatat(dfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			continue
		}
		typ := st.Mode & unix.S_IFMT
		if !plaintextNames && typ == unix.S_IFREG {
			switch {
			case name == names.DirIVFile:
				c.DirIVs++
				continue
			case names.IsSidecar(name):
				c.Sidecars++
				continue
			}
		}
		switch typ {
		case unix.S_IFREG:
			c.Files++
			c.LowerBytes += st.Size
			c.AllocatedBytes += st.Blocks * 512
			if n, err := content.PlainSize(st.Size); err != nil {
				c.TornFiles++
			} else {
				c.PlainBytes += n
			}
		case unix.S_IFDIR:
			c.Dirs++
			sub, err := openAt(dfd, name, unix.O_DIRECTORY, &st)
			if err != nil {
				if !errors.Is(err, errChanged) {
					c.Unreadable++
				}
				continue
			}
			c.walk(sub, false, plaintextNames)
			sub.Close()
		case unix.S_IFLNK:
			c.Symlinks++
		default:
			c.Other++
		}
	}
}
