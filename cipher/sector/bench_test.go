package sector

import (
	"crypto/aes"
	"fmt"
	"runtime"
	"testing"
	"time"

	"golang.org/x/crypto/xts"
)

var benchSizes = []struct {
	name string
	n    int
}{
	{"512", 512},
	{"4096", 4096},
	{"1MiB", 1 << 20},
}

var benchXTSKeys = []struct {
	name string
	size int
}{
	{"aes128", 32},
	{"aes256", 64},
}

func benchUnit(b *testing.B, n int, f func(dst, src []byte, unit uint64)) {
	buf := make([]byte, n)
	b.SetBytes(int64(n))
	b.ReportAllocs()
	unit := uint64(0)
	cpu := startCPU(b)
	for b.Loop() {
		f(buf, buf, unit) // in place, as the filesystem does
		unit++
	}
	cpu.report(b, n)
}

// cpuMeter adds a cpu-MB/s metric to a benchmark: bytes per second of the
// benchmark thread's CPU time rather than of wall time, which on a shared
// machine counts the time other processes had the core. The figure to
// compare with `openssl speed`, which also divides by CPU time by default.
type cpuMeter struct {
	start time.Duration
	ok    bool
}

func startCPU(b *testing.B) cpuMeter {
	runtime.LockOSThread()
	b.Cleanup(runtime.UnlockOSThread)
	t, ok := threadCPUTime()
	return cpuMeter{start: t, ok: ok}
}

// report records cpu-MB/s for b.N operations of n bytes each.
func (m cpuMeter) report(b *testing.B, n int) {
	end, ok := threadCPUTime()
	if !m.ok || !ok || end <= m.start {
		return
	}
	b.ReportMetric(float64(n)*float64(b.N)/(end-m.start).Seconds()/1e6, "cpu-MB/s")
}

// BenchmarkXTS measures aes-xts-plain64 Encrypt:
// BenchmarkXTS/{aes128,aes256}/{512,4096,1MiB}.
func BenchmarkXTS(b *testing.B) {
	for _, k := range benchXTSKeys {
		c := mustNew(b, "aes-xts-plain64", make([]byte, k.size))
		for _, s := range benchSizes {
			b.Run(k.name+"/"+s.name, func(b *testing.B) { benchUnit(b, s.n, c.Encrypt) })
		}
	}
}

// BenchmarkXTSDecrypt is BenchmarkXTS for Decrypt.
func BenchmarkXTSDecrypt(b *testing.B) {
	for _, k := range benchXTSKeys {
		c := mustNew(b, "aes-xts-plain64", make([]byte, k.size))
		for _, s := range benchSizes {
			b.Run(k.name+"/"+s.name, func(b *testing.B) { benchUnit(b, s.n, c.Decrypt) })
		}
	}
}

// BenchmarkXTSStealing measures the ciphertext-stealing path (4096+5 bytes).
func BenchmarkXTSStealing(b *testing.B) {
	c := mustNew(b, "aes-xts-plain64", make([]byte, 32))
	b.Run("encrypt/4101", func(b *testing.B) { benchUnit(b, 4101, c.Encrypt) })
	b.Run("decrypt/4101", func(b *testing.B) { benchUnit(b, 4101, c.Decrypt) })
}

// BenchmarkXCryptoXTS is golang.org/x/crypto/xts on the same sizes, as a
// yardstick for BenchmarkXTS.
func BenchmarkXCryptoXTS(b *testing.B) {
	for _, k := range benchXTSKeys {
		x, err := xts.NewCipher(aes.NewCipher, make([]byte, k.size))
		if err != nil {
			b.Fatal(err)
		}
		for _, s := range benchSizes[:2] {
			b.Run(k.name+"/"+s.name, func(b *testing.B) { benchUnit(b, s.n, x.Encrypt) })
		}
	}
}

// BenchmarkCBC measures the CBC specs on 4096-byte units:
// BenchmarkCBC/{spec}/{aes128,aes256}/{encrypt,decrypt}/4096.
func BenchmarkCBC(b *testing.B) {
	for _, spec := range []string{"aes-cbc-essiv:sha256", "aes-cbc-plain64"} {
		for _, ks := range []int{16, 32} {
			c := mustNew(b, spec, make([]byte, ks))
			name := fmt.Sprintf("%s/aes%d", spec, ks*8)
			b.Run(name+"/encrypt/4096", func(b *testing.B) { benchUnit(b, 4096, c.Encrypt) })
			b.Run(name+"/decrypt/4096", func(b *testing.B) { benchUnit(b, 4096, c.Decrypt) })
		}
	}
}

// BenchmarkCBCDecrypt measures aes-cbc-plain64 Decrypt of one 4096-byte
// unit per call, in place, on every implementation the CPU has, without
// GODEBUG: BenchmarkCBCDecrypt/{impl}/{aes128,aes256}/{4096,1MiB}. 4096
// decrypts the same unit over and over (in L1), the figure to set against
// `openssl speed -evp aes-N-cbc -decrypt -bytes 4096`, which does the same
// (scripts/bench-cbc-openssl.sh); 1MiB decrypts the 256 units of a 1 MiB
// buffer in turn, one call each, as `twincrypt speed` does and as the
// filesystem meets data: not in L1.
func BenchmarkCBCDecrypt(b *testing.B) {
	for _, im := range availableImpls() {
		for _, ks := range []int{16, 32} {
			c := mustNewImpl(b, "aes-cbc-plain64", make([]byte, ks), im)
			b.Run(fmt.Sprintf("%v/aes%d/4096", im, ks*8), func(b *testing.B) { benchUnit(b, 4096, c.Decrypt) })
			b.Run(fmt.Sprintf("%v/aes%d/1MiB", im, ks*8), func(b *testing.B) {
				const total, unitSize = 1 << 20, 4096
				benchUnit(b, total, func(dst, src []byte, unit uint64) {
					for i := 0; i < total; i += unitSize {
						c.Decrypt(dst[i:i+unitSize], src[i:i+unitSize], unit)
						unit++
					}
				})
			})
		}
	}
}

// BenchmarkSectors measures MultiCipher on 1 MiB of 4096-byte sectors
// (cbc256s512: 512-byte sectors, as twincrypt's aes-cbc stores an extent),
// in place, with every implementation the CPU supports (the last listed is
// the one New uses; generic is the portable Go):
// BenchmarkSectors/{impl}/{xts128,xts256,cbc128,cbc256,cbc256s512}/{encrypt,decrypt}.
// CBC encryption is where EncryptSectors differs most from a loop over
// Encrypt: it runs 8 or 16 units side by side.
func BenchmarkSectors(b *testing.B) {
	const total = 1 << 20
	modes := []struct {
		name, spec string
		keySize    int
		sectorSize int
	}{
		{"xts128", "aes-xts-plain64", 32, 4096},
		{"xts256", "aes-xts-plain64", 64, 4096},
		{"cbc128", "aes-cbc-essiv:sha256", 16, 4096},
		{"cbc256", "aes-cbc-essiv:sha256", 32, 4096},
		{"cbc256s512", "aes-cbc-essiv:sha256", 32, 512}, // twincrypt's aes-cbc since format 2
	}
	for _, im := range availableImpls() {
		for _, m := range modes {
			c := mustNewImpl(b, m.spec, make([]byte, m.keySize), im).(MultiCipher)
			for _, op := range []struct {
				name string
				f    func(dst, src []byte, sectorSize int, firstUnit uint64)
			}{{"encrypt", c.EncryptSectors}, {"decrypt", c.DecryptSectors}} {
				b.Run(im.String()+"/"+m.name+"/"+op.name, func(b *testing.B) {
					buf := make([]byte, total)
					b.SetBytes(total)
					b.ReportAllocs()
					unit := uint64(0)
					cpu := startCPU(b)
					for b.Loop() {
						op.f(buf, buf, m.sectorSize, unit)
						unit += uint64(total / m.sectorSize)
					}
					cpu.report(b, total)
				})
			}
		}
	}
}

// BenchmarkCBCRun measures aes-cbc-essiv:sha256 (AES-256) over 512-byte
// sectors as twincrypt's format version 2 stores a unit: a full extent
// (eight sectors) and tail units of 1016 and 2616 bytes (a short last
// sector), with EncryptRun against one chain over the whole unit:
// BenchmarkCBCRun/{run512,chain}/{4096,1016,2616}.
func BenchmarkCBCRun(b *testing.B) {
	c := mustNew(b, "aes-cbc-essiv:sha256", make([]byte, 32)).(RunCipher)
	for _, n := range []int{4096, 1016, 2616} {
		b.Run(fmt.Sprintf("run512/%d", n), func(b *testing.B) {
			benchUnit(b, n, func(dst, src []byte, unit uint64) { c.EncryptRun(dst, src, 512, unit*8) })
		})
		b.Run(fmt.Sprintf("chain/%d", n), func(b *testing.B) { benchUnit(b, n, c.Encrypt) })
	}
}
