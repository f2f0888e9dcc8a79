package bench

import (
	"os"
	"runtime"
	"strings"

	"github.com/twincrypt/twincrypt/cipher/sector"
	"golang.org/x/sys/cpu"
	"golang.org/x/sys/unix"
)

// Machine is what a reader of the results must know about the machine:
// whether AES runs in hardware decides most of what encryption costs.
type Machine struct {
	CPU       string  `json:"cpu"`
	Cores     int     `json:"cores"`
	MemoryGiB float64 `json:"memory_gib"`
	// AESNI: the AES instructions (x86 AES-NI, arm64 AES).
	AESNI bool `json:"aes_ni"`
	// VAES: vector AES (256-bit, AVX2 era); AVX512VAES its 512-bit form.
	VAES       bool   `json:"vaes"`
	AVX512VAES bool   `json:"avx512_vaes"`
	Kernel     string `json:"kernel"`
	Go         string `json:"go"`
	// Twincrypt is the version of the binary that ran the bench.
	Twincrypt string `json:"twincrypt,omitempty"`
	// CipherPath is the content cipher's code on this machine
	// (sector.Implementation: vaes512, aesni or generic); GODEBUG=
	// cpu.avx512f=off in the bench's environment forces aesni.
	CipherPath string `json:"cipher_path,omitempty"`
}

// DetectMachine describes this machine.
func DetectMachine() Machine {
	m := Machine{
		CPU:        cpuModel(),
		Cores:      runtime.NumCPU(),
		MemoryGiB:  float64(memTotal()) / (1 << 30),
		AESNI:      cpu.X86.HasAES || cpu.ARM64.HasAES,
		AVX512VAES: cpu.X86.HasAVX512VAES,
		CipherPath: sector.Implementation(),
		Go:         runtime.Version(),
	}
	// x/sys/cpu knows the 512-bit VAES only; the kernel lists both as "vaes".
	m.VAES = m.AVX512VAES || cpuFlag("vaes")
	var u unix.Utsname
	if unix.Uname(&u) == nil {
		m.Kernel = unix.ByteSliceToString(u.Release[:])
	}
	// Set by integration/kvm inside its VM. Under TCG every instruction is
	// emulated: the figures show that the targets work, not how fast.
	switch os.Getenv("TWINCRYPT_VM") {
	case "tcg":
		m.Kernel += " (kernel VM under TCG, emulated: functional figures, not performance)"
	case "kvm":
		m.Kernel += " (kernel VM under KVM)"
	}
	return m
}

// cpuinfo returns the first value of key in /proc/cpuinfo.
func cpuinfo(key string) string {
	data, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(string(data), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if ok && strings.TrimSpace(k) == key {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

func cpuModel() string {
	for _, k := range []string{"model name", "Model", "cpu model", "Hardware"} {
		if v := cpuinfo(k); v != "" {
			return v
		}
	}
	return runtime.GOARCH
}

func cpuFlag(flag string) bool {
	for _, f := range strings.Fields(cpuinfo("flags")) {
		if f == flag {
			return true
		}
	}
	return false
}

// memTotal is MemTotal from /proc/meminfo in bytes (0 if unknown).
func memTotal() int64 {
	var si unix.Sysinfo_t
	if unix.Sysinfo(&si) != nil {
		return 0
	}
	return int64(si.Totalram) * int64(si.Unit)
}
