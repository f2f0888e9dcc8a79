package fs

import (
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// Issue 41: the mount flags fstab users write reach the mount; suid and
// dev are opt-in (root only), nosuid,nodev the default. A device node
// opens only where dev is given, as natively on a nodev mount.
func TestMountFlags(t *testing.T) {
	requireFUSE(t)
	if os.Geteuid() != 0 {
		t.Skip("needs root: a direct mount, suid and dev, mknod")
	}
	cases := []struct {
		flags       []string
		set, notSet int64
		deviceOpens bool
	}{
		{nil, unix.ST_NOSUID | unix.ST_NODEV, unix.ST_NOATIME, false},
		{[]string{"noatime", "nodiratime"}, unix.ST_NOSUID | unix.ST_NODEV | unix.ST_NOATIME | unix.ST_NODIRATIME, 0, false},
		{[]string{"noatime", "strictatime"}, unix.ST_NOSUID, unix.ST_NOATIME | unix.ST_RELATIME, false},
		{[]string{"suid", "dev", "relatime"}, unix.ST_RELATIME, unix.ST_NOSUID | unix.ST_NODEV, true},
	}
	for _, v := range variants {
		for _, c := range cases {
			tm := newVolume(t, v)
			tm.mount(t, func(o *Options) { o.MountFlags = c.flags })
			var st unix.Statfs_t
			must(t, unix.Statfs(tm.mnt, &st))
			if st.Flags&c.set != c.set || st.Flags&c.notSet != 0 {
				t.Errorf("%s %q: statfs flags %#x; want %#x set, %#x clear", v.name, c.flags, st.Flags, c.set, c.notSet)
			}
			null := filepath.Join(tm.mnt, "null")
			must(t, unix.Mknod(null, unix.S_IFCHR|0666, int(unix.Mkdev(1, 3))))
			fd, err := unix.Open(null, unix.O_WRONLY|unix.O_CLOEXEC, 0)
			if err == nil {
				unix.Close(fd)
			}
			if (err == nil) != c.deviceOpens {
				t.Errorf("%s %q: open of a device node: %v; want it to open: %v", v.name, c.flags, err, c.deviceOpens)
			}
			tm.unmountNow(t)
		}
	}
	if err := CheckMountFlags([]string{"noatime", "bogus"}); err == nil {
		t.Errorf("CheckMountFlags took an unknown flag")
	}
}
