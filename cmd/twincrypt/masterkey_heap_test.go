package main

// Issue 39, finding 5: after a master key is read (--masterkey-file, or
// --masterkey from a pipe, and the hex the background child is sent), no
// hex copy of it may be left anywhere in the process's memory, where a
// core dump or a reader of /proc/PID/mem would find it. The test runs the
// parse in a child process (this test binary), which then searches all of
// its own readable memory for pieces of the key in hex. The child never
// holds the hex it searches for: the needles come XORed with 0xff and are
// compared XORed.

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
)

const heapScanEnv = "TWINCRYPT_TEST_HEAPSCAN"

func TestMasterKeyNotInMemory(t *testing.T) {
	if os.Getenv(heapScanEnv) != "" {
		t.Skip("the child's half runs in TestMasterKeyNotInMemoryChild")
	}
	key := make([]byte, 64)
	for i := range key {
		key[i] = byte(0x3c + i*29)
	}
	printed := strings.Join(formatMasterKey(key), "\n") + "\n"
	keyFile := filepath.Join(t.TempDir(), "masterkey")
	if err := os.WriteFile(keyFile, []byte(printed), 0o600); err != nil {
		t.Fatal(err)
	}
	var needles []string
	for _, n := range keyHexPieces(key) {
		for j := range n {
			n[j] ^= 0xff
		}
		needles = append(needles, hex.EncodeToString(n))
	}
	cmd := exec.Command(os.Args[0], "-test.run", "^TestMasterKeyNotInMemoryChild$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), heapScanEnv+"="+keyFile+" "+strings.Join(needles, " "))
	cmd.Stdin = strings.NewReader(printed + "the rest of the pipe\n")
	out, err := cmd.CombinedOutput()
	sum := sha256.Sum256(key)
	if err != nil || !bytes.Contains(out, []byte("key sha256 "+hex.EncodeToString(sum[:]))) {
		t.Fatalf("the child failed (%v):\n%s", err, out)
	}
	if !bytes.Contains(out, []byte("scanned ")) {
		t.Fatalf("the child scanned nothing:\n%s", out)
	}
	t.Logf("child: %s", bytes.TrimSpace(out))
}

// TestMasterKeyNotInMemoryChild is the child's half: parse, then scan.
func TestMasterKeyNotInMemoryChild(t *testing.T) {
	arg := os.Getenv(heapScanEnv)
	if arg == "" {
		t.Skip("run by TestMasterKeyNotInMemory")
	}
	fields := strings.Fields(arg)
	keyFile, xneedles := fields[0], fields[1:]

	fromFile, err := readMasterKeyFile(keyFile)
	if err != nil {
		t.Fatal(err)
	}
	fromPipe, err := masterKeyFlags{prompt: true}.read(os.Stdin, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(fromFile.Bytes(), fromPipe.Bytes()) {
		t.Fatal("the key from the file and from the pipe differ")
	}
	text := masterKeyText(fromFile.Bytes())
	text.Destroy()
	sum := sha256.Sum256(fromFile.Bytes())
	fmt.Printf("key sha256 %x\n", sum)
	// Let the collector free what the parse left, as a long-running
	// daemon's would; freed memory is not cleared, so it is searched too.
	runtime.GC()
	runtime.GC()

	var needles [][]byte
	for _, x := range xneedles {
		b, err := hex.DecodeString(x)
		if err != nil {
			t.Fatal(err)
		}
		needles = append(needles, b)
	}
	found, scanned := scanMemory(t, "self", needles, 0xff)
	fmt.Printf("scanned %d MiB of memory\n", scanned>>20)
	for _, f := range found {
		t.Errorf("a piece of the master key in hex is in memory at %#x (%s)", f.addr, f.region)
	}
	runtime.KeepAlive(fromFile)
	runtime.KeepAlive(fromPipe)
}

// keyHexPieces are what a search for the key in hex looks for: two
// neighbouring groups of 8 digits, with the dash init prints between them
// and without, in lower and upper case (17 and 16 characters: a chance
// match in a few hundred MiB is below 2^-30).
func keyHexPieces(key []byte) [][]byte {
	h := hex.EncodeToString(key)
	var pieces [][]byte
	for i := 0; i+16 <= len(h); i += 8 {
		for _, n := range []string{h[i:i+8] + "-" + h[i+8:i+16], h[i : i+16]} {
			pieces = append(pieces, []byte(n), []byte(strings.ToUpper(n)))
		}
	}
	return pieces
}

// TestMasterKeyMountMemory: the daemon of a mount made with the master
// key, in the background (the key reaches the child over a pipe) and in the
// foreground (the daemon reads the key file itself), holds no hex copy of
// the key anywhere in its memory while it serves.
func TestMasterKeyMountMemory(t *testing.T) {
	requireFUSE(t)
	if os.Geteuid() != 0 {
		t.Skip("not root: another process's memory cannot be read")
	}
	pf := writePassfile(t, "pw")
	lower := filepath.Join(tempDir(t), "lower")
	if err := os.Mkdir(lower, 0o700); err != nil {
		t.Fatal(err)
	}
	r := twincrypt(t, "", append(append([]string{"init", "--passfile", pf}, cheapKDF...), lower)...)
	r.expectExit(t, 0, "init")
	keyText := printedMasterKey(t, r.stdout)
	key := masterKeyFromInit(t, r.stdout)
	keyFile := filepath.Join(tempDir(t), "masterkey")
	if err := os.WriteFile(keyFile, []byte(keyText), 0o600); err != nil {
		t.Fatal(err)
	}
	pieces := keyHexPieces(key)

	check := func(t *testing.T, mnt string, daemon int) {
		if err := os.WriteFile(filepath.Join(mnt, "f"), []byte("some content"), 0o600); err != nil {
			t.Fatal(err)
		}
		pid := strconv.Itoa(daemon)
		// The scan must be able to find things: the lower path is in the
		// daemon's memory for as long as it runs.
		if hits, _ := scanMemory(t, pid, [][]byte{[]byte(lower)}, 0); len(hits) == 0 {
			t.Fatal("the memory scan cannot even find the lower path: it would prove nothing")
		}
		hits, scanned := scanMemory(t, pid, pieces, 0)
		for _, h := range hits {
			t.Errorf("the daemon holds a piece of the master key in hex at %#x (%s)", h.addr, h.region)
		}
		t.Logf("scanned %d MiB of the daemon's memory", scanned>>20)
	}

	t.Run("background", func(t *testing.T) {
		mnt := newMountpoint(t)
		unmountOnCleanup(t, mnt)
		twincrypt(t, "", "mount", "-b", "-q", "--masterkey-file", keyFile, lower, mnt).expectExit(t, 0, "mount -b --masterkey-file")
		pids := daemonPIDs(t, mnt)
		if len(pids) != 1 {
			t.Fatalf("daemon processes for %s: %v", mnt, pids)
		}
		check(t, mnt, pids[0])
		twincrypt(t, "", "umount", mnt).expectExit(t, 0, "umount")
		waitDaemonGone(t, mnt)
	})
	t.Run("foreground", func(t *testing.T) {
		mnt := newMountpoint(t)
		unmountOnCleanup(t, mnt)
		cmd := exec.Command(binPath, "mount", "--masterkey-file", keyFile, lower, mnt)
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		exited := make(chan error, 1)
		ready := make(chan bool, 1)
		go func() {
			// The ready line, or the end of output when the mount fails.
			line, _ := bufio.NewReader(stdout).ReadString('\n')
			ready <- strings.HasPrefix(line, "Mounted ")
			_, _ = io.Copy(io.Discard, stdout)
			exited <- cmd.Wait()
		}()
		t.Cleanup(func() {
			_ = cmd.Process.Signal(os.Interrupt)
			select {
			case <-exited:
			case <-time.After(30 * time.Second):
				_ = cmd.Process.Kill()
			}
		})
		select {
		case ok := <-ready:
			if !ok {
				t.Fatalf("the foreground mount did not get ready: %s", stderr.String())
			}
		case <-time.After(60 * time.Second):
			t.Fatal("the foreground mount is not ready after 60 s")
		}
		check(t, mnt, cmd.Process.Pid)
	})
}

type memHit struct {
	addr   uint64
	region string
}

// scanMemory searches every readable mapping of process pid ("self", or a
// number: root may read another process's memory), through /proc/PID/mem,
// for the needles, given XORed with mask (0xff for "self", which must not
// hold what it looks for; 0 for another process).
func scanMemory(t *testing.T, pid string, xneedles [][]byte, mask byte) (hits []memHit, scanned uint64) {
	maps, err := os.Open("/proc/" + pid + "/maps")
	if err != nil {
		t.Skipf("no /proc/self/maps: %v", err)
	}
	type region struct {
		start, end uint64
		desc       string
	}
	var regions []region
	sc := bufio.NewScanner(maps)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 2 || f[1][0] != 'r' {
			continue
		}
		lo, hi, _ := strings.Cut(f[0], "-")
		start, err1 := strconv.ParseUint(lo, 16, 64)
		end, err2 := strconv.ParseUint(hi, 16, 64)
		if err1 != nil || err2 != nil {
			continue
		}
		desc := f[1]
		if len(f) >= 6 {
			desc += " " + f[5]
		}
		regions = append(regions, region{start, end, desc})
	}
	maps.Close()
	mem, err := os.Open("/proc/" + pid + "/mem")
	if err != nil {
		t.Skipf("no /proc/self/mem: %v", err)
	}
	defer mem.Close()
	const chunk = 1 << 20
	const overlap = 64
	buf := make([]byte, chunk+overlap)
	// byFirst lists the needles by their first byte as it is in memory.
	var byFirst [256][][]byte
	for _, x := range xneedles {
		byFirst[x[0]^mask] = append(byFirst[x[0]^mask], x)
	}
	for _, r := range regions {
		for off := r.start; off < r.end; off += chunk {
			n := min(uint64(chunk+overlap), r.end-off)
			got, err := mem.ReadAt(buf[:n], int64(off))
			if err != nil && got == 0 {
				break // [vvar] and the like
			}
			scanned += uint64(min(got, chunk))
			for i := 0; i < min(got, chunk); i++ {
				for _, x := range byFirst[buf[i]] {
					if i+len(x) <= got && xorEqual(buf[i:i+len(x)], x, mask) {
						hits = append(hits, memHit{off + uint64(i), r.desc})
					}
				}
			}
		}
	}
	return hits, scanned
}

func xorEqual(mem, x []byte, mask byte) bool {
	for i := range x {
		if mem[i]^mask != x[i] {
			return false
		}
	}
	return true
}
