package main

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestParseMountOpts(t *testing.T) {
	tests := []struct {
		in      []string
		want    mountOpts
		wantErr bool
	}{
		{nil, mountOpts{}, false},
		{[]string{""}, mountOpts{}, false},
		{[]string{"ro"}, mountOpts{ro: true}, false},
		{[]string{"allow_other,ro,debug"}, mountOpts{allowOther: true, ro: true, debug: true}, false},
		{[]string{"ro,,debug,"}, mountOpts{ro: true, debug: true}, false},
		{[]string{"ro", "allow_other"}, mountOpts{ro: true, allowOther: true}, false},
		{[]string{"nonempty"}, mountOpts{nonempty: true}, false},
		{[]string{"noexec,ro"}, mountOpts{noexec: true, ro: true}, false},
		{[]string{" ro , debug "}, mountOpts{ro: true, debug: true}, false},
		{[]string{"rw"}, mountOpts{}, true},
		{[]string{"ro,bogus"}, mountOpts{}, true},
		{[]string{"ro", "allow_others"}, mountOpts{}, true},
		{[]string{"RO"}, mountOpts{}, true},
		// Issue 41: what fstab users write.
		{[]string{"noatime,ro,nodiratime"}, mountOpts{ro: true, flags: []string{"noatime", "nodiratime"}}, false},
		{[]string{"relatime", "strictatime,lazytime"}, mountOpts{flags: []string{"relatime", "strictatime", "lazytime"}}, false},
		{[]string{"nosuid,nodev"}, mountOpts{flags: []string{"nosuid", "nodev"}}, false},
		{[]string{"noatime=1"}, mountOpts{}, true},
	}
	if os.Geteuid() == 0 {
		tests = append(tests, struct {
			in      []string
			want    mountOpts
			wantErr bool
		}{[]string{"suid,dev"}, mountOpts{flags: []string{"suid", "dev"}}, false})
	} else {
		tests = append(tests, struct {
			in      []string
			want    mountOpts
			wantErr bool
		}{[]string{"suid"}, mountOpts{}, true})
	}
	for _, tt := range tests {
		got, err := parseMountOpts(tt.in)
		if tt.wantErr {
			if err == nil || exitCode(err) != exitUsage {
				t.Errorf("parseMountOpts(%q) = %+v, %v; want a usage error", tt.in, got, err)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(got, tt.want) {
			t.Errorf("parseMountOpts(%q) = %+v, %v; want %+v", tt.in, got, err, tt.want)
		}
	}
}

func TestMountOptsRoundTrip(t *testing.T) {
	for _, o := range []mountOpts{{}, {ro: true}, {allowOther: true, debug: true, nonempty: true}, {true, true, true, true, true, nil},
		{noexec: true, flags: []string{"noatime", "nodiratime", "lazytime"}}} {
		got, err := parseMountOpts([]string{o.String()})
		if err != nil || !reflect.DeepEqual(got, o) {
			t.Errorf("%+v -> %q -> %+v, %v", o, o.String(), got, err)
		}
	}
}

func TestCheckMountpoint(t *testing.T) {
	root := t.TempDir()
	lower := filepath.Join(root, "lower")
	mnt := filepath.Join(root, "mnt")
	full := filepath.Join(root, "full")
	for _, d := range []string{lower, mnt, full, filepath.Join(lower, "sub"), filepath.Join(mnt, "lower2")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(full, "f"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	sibling := filepath.Join(root, "lowerx") // shares a prefix with lower, is not inside it
	if err := os.Mkdir(sibling, 0o700); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name       string
		lower, mnt string
		nonempty   bool
		wantErr    string
	}{
		{"ok", lower, mnt + "/lower2", false, ""},
		{"prefix sibling ok", lower, sibling, false, ""},
		{"same", lower, lower, false, "LOWER itself"},
		{"inside", lower, filepath.Join(lower, "sub"), false, "inside LOWER"},
		{"lower inside mnt", filepath.Join(mnt, "lower2"), mnt, true, "inside mountpoint"},
		{"not empty", lower, full, false, "not empty"},
		{"nonempty allowed", lower, full, true, ""},
	}
	for _, tt := range tests {
		err := checkMountpoint(tt.lower, tt.mnt, tt.nonempty)
		if tt.wantErr == "" {
			if err != nil {
				t.Errorf("%s: %v", tt.name, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tt.wantErr) || exitCode(err) != exitMountpoint {
			t.Errorf("%s: err = %v (exit %d), want %q and exit %d", tt.name, err, exitCode(err), tt.wantErr, exitMountpoint)
		}
	}
}

func TestRealDir(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "f")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink(dir, link); err != nil {
		t.Fatal(err)
	}
	want, _ := filepath.EvalSymlinks(dir)
	if got, err := realDir(link, "LOWER"); err != nil || got != want {
		t.Errorf("realDir(link) = %q, %v; want %q", got, err, want)
	}
	if _, err := realDir(file, "LOWER"); err == nil || !strings.Contains(err.Error(), "not a directory") {
		t.Errorf("realDir(file) err = %v", err)
	}
	if _, err := realDir(filepath.Join(dir, "nope"), "LOWER"); err == nil || !strings.Contains(err.Error(), "does not exist") {
		t.Errorf("realDir(missing) err = %v", err)
	}
}

func TestReadMountInfo(t *testing.T) {
	const sample = `22 1 259:2 / / rw,relatime shared:1 - ext4 /dev/nvme0n1p2 rw
36 22 0:32 / /tmp/with\040space rw,nosuid,nodev,relatime shared:2 - fuse.twincrypt /srv/low\040er rw,user_id=0,group_id=0
37 22 0:33 / /mnt/plain rw - tmpfs tmpfs rw
38 22 0:34 / /mnt/back\134slash rw master:3 unbindable - fuse /x rw
bad line
`
	got, err := readMountInfo(strings.NewReader(sample))
	if err != nil {
		t.Fatal(err)
	}
	want := []mountInfo{
		{22, 1, "259:2", "/", "ext4", "/dev/nvme0n1p2", "rw"},
		{36, 22, "0:32", "/tmp/with space", "fuse.twincrypt", "/srv/low er", "rw,user_id=0,group_id=0"},
		{37, 22, "0:33", "/mnt/plain", "tmpfs", "tmpfs", "rw"},
		{38, 22, "0:34", `/mnt/back\slash`, "fuse", "/x", "rw"},
	}
	if len(got) != len(want) {
		t.Fatalf("got %d mounts %+v, want %d", len(got), got, len(want))
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("mount %d = %+v, want %+v", i, got[i], want[i])
		}
	}
	for i, w := range []struct {
		uid int
		ok  bool
	}{{0, false}, {0, true}, {0, false}, {0, false}} {
		if uid, ok := got[i].fuseOwner(); uid != w.uid || ok != w.ok {
			t.Errorf("mount %d: fuseOwner %d %v, want %d %v", i, uid, ok, w.uid, w.ok)
		}
	}
}

func TestIsWithin(t *testing.T) {
	tests := []struct {
		path, dir string
		want      bool
	}{
		{"/a/b", "/a", true},
		{"/a/b/c", "/a", true},
		{"/a", "/a", false},
		{"/ab", "/a", false},
		{"/", "/a", false},
		{"/a/..b", "/a", true},
	}
	for _, tt := range tests {
		if got := isWithin(tt.path, tt.dir); got != tt.want {
			t.Errorf("isWithin(%q, %q) = %v", tt.path, tt.dir, got)
		}
	}
}

func TestUmountNotAMountPoint(t *testing.T) {
	err := unmountPath(t.TempDir(), false)
	if exitCode(err) != exitMountpoint || !strings.Contains(err.Error(), "not a mount point") {
		t.Fatalf("err = %v (exit %d)", err, exitCode(err))
	}
	if !errors.Is(err, errMountpoint) {
		t.Errorf("not an errMountpoint: %v", err)
	}
}
