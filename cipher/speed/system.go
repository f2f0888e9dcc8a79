package speed

import (
	"bufio"
	"bytes"
	"os"
	"runtime"
	"strconv"
	"strings"

	"golang.org/x/sys/cpu"
)

// Feature is one CPU feature that matters for disk-encryption speed.
type Feature struct {
	Name    string `json:"name"`
	Present bool   `json:"present"`
}

// System describes the machine and the Go runtime the numbers come from.
type System struct {
	CPUModel   string    `json:"cpu_model"`
	NumCPU     int       `json:"num_cpu"`
	GOMAXPROCS int       `json:"gomaxprocs"`
	GoVersion  string    `json:"go_version"`
	GOOS       string    `json:"goos"`
	GOARCH     string    `json:"goarch"`
	Kernel     string    `json:"kernel,omitempty"`
	Features   []Feature `json:"features"`
}

// ReadSystem collects the CPU model (from /proc/cpuinfo), the CPU features
// relevant to AES (from golang.org/x/sys/cpu, and /proc/cpuinfo for the bits
// x/sys/cpu only reports together with AVX-512), the Go version and
// GOMAXPROCS.
func ReadSystem() System {
	info, _ := os.ReadFile("/proc/cpuinfo")
	s := System{
		CPUModel:   cpuModel(info),
		NumCPU:     runtime.NumCPU(),
		GOMAXPROCS: runtime.GOMAXPROCS(0),
		GoVersion:  runtime.Version(),
		GOOS:       runtime.GOOS,
		GOARCH:     runtime.GOARCH,
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		s.Kernel = strings.TrimSpace(string(b))
	}
	flags := cpuFlags(info)
	switch runtime.GOARCH {
	case "amd64", "386":
		// VAES and VPCLMULQDQ are single CPUID bits usable with AVX2 (VEX)
		// or AVX-512 (EVEX); x/sys/cpu only has them as AVX512 variants,
		// so the kernel's flags are preferred when present.
		vaes := cpu.X86.HasAVX512VAES
		vpclmul := cpu.X86.HasAVX512VPCLMULQDQ
		if flags != nil {
			vaes = flags["vaes"]
			vpclmul = flags["vpclmulqdq"]
		}
		s.Features = []Feature{
			{"AES-NI", cpu.X86.HasAES},
			{"PCLMULQDQ", cpu.X86.HasPCLMULQDQ},
			{"VAES", vaes},
			{"VPCLMULQDQ", vpclmul},
			{"AVX2", cpu.X86.HasAVX2},
			{"AVX512F", cpu.X86.HasAVX512F},
		}
	case "arm64":
		s.Features = []Feature{
			{"AES", cpu.ARM64.HasAES},
			{"PMULL", cpu.ARM64.HasPMULL},
			{"SHA2", cpu.ARM64.HasSHA2},
			{"SHA512", cpu.ARM64.HasSHA512},
		}
	}
	return s
}

// cpuModel returns the first "model name" of /proc/cpuinfo (x86), or what
// other architectures put there, or the architecture name.
func cpuModel(info []byte) string {
	for _, key := range []string{"model name", "Model", "Hardware", "cpu model", "cpu"} {
		if v, ok := cpuinfoField(info, key); ok && v != "" {
			return v
		}
	}
	return runtime.GOARCH
}

// cpuinfoField returns the value of the first "key : value" line of info.
func cpuinfoField(info []byte, key string) (string, bool) {
	sc := bufio.NewScanner(bytes.NewReader(info))
	sc.Buffer(make([]byte, 64*1024), 1<<20)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if ok && strings.TrimSpace(k) == key {
			return strings.TrimSpace(v), true
		}
	}
	return "", false
}

// cpuFlags returns the first "flags" line of /proc/cpuinfo as a set, or nil.
func cpuFlags(info []byte) map[string]bool {
	v, ok := cpuinfoField(info, "flags")
	if !ok {
		return nil
	}
	m := map[string]bool{}
	for _, f := range strings.Fields(v) {
		m[f] = true
	}
	return m
}

// maxArgon2MemoryKiB is cryptsetup's ceiling for argon2 memory: 1 GiB.
const maxArgon2MemoryKiB = 1 << 20

// Argon2MemoryCap returns the most memory, in KiB, that the argon2 search
// may use: 1 GiB as in cryptsetup, but no more than half of the memory
// available now (MemAvailable, or what the cgroup still allows), so that the
// benchmark cannot push the machine into swap or the OOM killer. source says
// which bound applied.
func Argon2MemoryCap() (kib uint32, source string) {
	avail, ok := availableMemoryKiB()
	if !ok || avail/2 >= maxArgon2MemoryKiB {
		return maxArgon2MemoryKiB, "1 GiB maximum (as cryptsetup)"
	}
	half := avail / 2
	if half < 64 {
		half = 64
	}
	return uint32(half), "half of the available memory (" + strconv.FormatUint(avail/1024, 10) + " MiB available)"
}

// availableMemoryKiB returns MemAvailable from /proc/meminfo, lowered to what
// a cgroup v2 memory limit still leaves.
func availableMemoryKiB() (uint64, bool) {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0, false
	}
	var avail uint64
	found := false
	for line := range strings.Lines(string(b)) {
		f := strings.Fields(line)
		if len(f) >= 2 && f[0] == "MemAvailable:" {
			if v, err := strconv.ParseUint(f[1], 10, 64); err == nil {
				avail, found = v, true
			}
		}
	}
	if !found {
		return 0, false
	}
	limit, err1 := os.ReadFile("/sys/fs/cgroup/memory.max")
	cur, err2 := os.ReadFile("/sys/fs/cgroup/memory.current")
	if err1 == nil && err2 == nil {
		l, errL := strconv.ParseUint(strings.TrimSpace(string(limit)), 10, 64)
		c, errC := strconv.ParseUint(strings.TrimSpace(string(cur)), 10, 64)
		if errL == nil && errC == nil && l > c && (l-c)/1024 < avail {
			avail = (l - c) / 1024
		}
	}
	return avail, true
}
