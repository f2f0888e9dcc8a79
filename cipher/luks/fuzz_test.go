package luks

import (
	"bytes"
	"encoding/binary"
	"errors"
	"runtime"
	"testing"

	"github.com/twincrypt/twincrypt/cipher/sector"
)

// fuzzSeeds are small LUKS images, so that the fuzzer mutates and minimizes
// quickly: LUKS2 headers formatted with one AF stripe and a 4 KiB keyslots
// area (40 KiB images; pbkdf2 and argon2id), and the first sectors of the
// frozen cryptsetup volumes (their keyslots then lie beyond the end).
func fuzzSeeds(f *testing.F) [][]byte {
	var seeds [][]byte
	small := layout{hdrSize: formatHdrSize, keyslotsSize: 4096, stripes: 1}
	for _, o := range []FormatOptions{
		{KeyBytes: 32, PBKDF: "pbkdf2", Iterations: 1000},
		{KeyBytes: 32, PBKDF: "argon2id", Time: 4, MemoryKiB: 32, Threads: 1, SectorSize: 4096},
	} {
		img := &memImage{}
		if _, err := formatLayout(img, small.dataOffset()+4096, []byte("pw"), o, small); err != nil {
			f.Fatal(err)
		}
		img.WriteAt(make([]byte, 4096), small.dataOffset())
		seeds = append(seeds, img.b)
	}
	seeds = append(seeds, readGz(f, "luks1-cbc-essiv-128.img.gz")[:4096])
	seeds = append(seeds, readGz(f, "luks2-xts-4096.hdr.gz")[:formatKeyslotsOff])
	return seeds
}

// FuzzOpen feeds Open arbitrary images (run it with -fuzzminimizetime 10x:
// minimizing an image costs a KDF per try). With fixSum set the primary LUKS2
// header's checksum is recomputed first, so that mutations reach the JSON
// and the keyslots instead of stopping at the checksum. Open must not panic,
// must fail only with its sentinel errors, must not allocate more than a few
// MiB (the KDF costs are capped by testLimits: pbkdf2 1000 iterations, argon2
// 4 passes of 1 MiB), and what it opens must be usable.
func FuzzOpen(f *testing.F) {
	for _, s := range fuzzSeeds(f) {
		f.Add(s, false)
		f.Add(s, true)
	}
	f.Fuzz(func(t *testing.T, data []byte, fixSum bool) {
		if fixSum && len(data) >= bin2Len {
			size := binary.BigEndian.Uint64(data[bin2HdrSize:])
			if size >= hdr2MinSize && size <= uint64(len(data)) && size%bin2Len == 0 {
				if sum, err := checksum2(cString(data[bin2ChecksumAlg:bin2ChecksumAlg+bin2AlgLen]), data, data[bin2Len:size]); err == nil {
					copy(data[bin2Checksum:bin2Checksum+bin2ChecksumLen], make([]byte, bin2ChecksumLen))
					copy(data[bin2Checksum:], sum)
				}
			}
		}
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		v, err := open(bytes.NewReader(data), []byte("pw"), testLimits)
		runtime.ReadMemStats(&after)
		if grown := after.TotalAlloc - before.TotalAlloc; grown > 64<<20 {
			t.Fatalf("Open of %d bytes allocated %d MiB", len(data), grown>>20)
		}
		if err != nil {
			if !errors.Is(err, ErrNotLUKS) && !errors.Is(err, ErrCorruptHeader) &&
				!errors.Is(err, ErrUnsupported) && !errors.Is(err, ErrWrongPassphrase) {
				t.Fatalf("Open: unexpected error %v", err)
			}
			return
		}
		if _, err := sector.New(v.Cipher, v.Key); err != nil {
			t.Fatalf("Open returned a volume sector cannot use: %+v: %v", v, err)
		}
		if v.Offset < 0 || v.Size < -1 || v.SectorSize < 512 || v.SectorSize > 4096 {
			t.Fatalf("Open returned bad geometry: %+v", v)
		}
	})
}

// FuzzParseMetadata feeds the JSON parser arbitrary text in a 16 KiB header
// (no checksum in the way). What it accepts must respect the bounds.
func FuzzParseMetadata(f *testing.F) {
	for _, s := range fuzzSeeds(f) {
		if s[0] == 'L' && binary.BigEndian.Uint16(s[bin2Version:]) == 2 {
			f.Add(bytes.Clone(s[bin2Len : bin2Len+bytes.IndexByte(s[bin2Len:], 0)]))
		}
	}
	f.Add([]byte(`{"keyslots":{},"tokens":{},"segments":{},"digests":{},"config":{"json_size":"12288","keyslots_size":"0"}}`))
	f.Fuzz(func(t *testing.T, text []byte) {
		area := make([]byte, formatHdrSize-bin2Len)
		copy(area, text)
		m, err := parseMetadata(area, formatHdrSize, testLimits)
		if err != nil {
			if !errors.Is(err, ErrCorruptHeader) {
				t.Fatalf("parseMetadata: unexpected error %v", err)
			}
			return
		}
		for _, ks := range m.keyslots {
			if ks.keySize < 1 || ks.keySize > maxKeySize || ks.stripes < 1 || ks.stripes > afMaxStripes ||
				ks.areaOffset < 2*formatHdrSize || ks.areaSize < int64(afSize(ks.keySize, ks.stripes)) {
				t.Fatalf("accepted keyslot %+v", ks)
			}
			if ks.unusable == nil {
				if err := ks.kdf.check(testLimits); err != nil {
					t.Fatalf("usable keyslot with a bad kdf: %v", err)
				}
			}
		}
	})
}
