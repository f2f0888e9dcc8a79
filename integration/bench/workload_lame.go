package bench

import (
	"bufio"
	"compress/flate"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
)

// lameSeconds is the length of the WAV lame encodes (44.1 kHz, 16-bit
// stereo: 172 KiB a second; large: Phoronix's 83 MB song.wav).
var lameSeconds = scale[int]{tiny: 5, small: 30, dflt: 180, large: 470}

const (
	wavRate     = 44100
	wavChannels = 2
	wavHeader   = 44 // bytes of a canonical PCM WAV header
)

// Lame is Phoronix's `lame -h song.wav song.mp3`, reading a WAV from the
// target and writing the MP3 to it: CPU-bound, so every layer should cost
// next to nothing, and a layer that does not is wasting CPU the
// application needed. The WAV (a mix of sines, built once in the cache)
// is copied onto the target first (not measured).
//
// LAME is deterministic: the same WAV and options give the same MP3, byte
// for byte. Prepare encodes the WAV once in the cache, and every run's MP3
// must have that reference's SHA-256. Where lame is not installed, a
// stand-in with the same shape runs: compress/flate at level 9 from the
// WAV on the target to a file on the target, verified by inflating it.
type Lame struct {
	noPrograms bool // tests: use the stand-in
	inputs     cachedInputs
}

func (*Lame) Name() string { return "lame" }

func (*Lame) Describe() string {
	return "lame -h of a WAV on the target to an MP3 on the target (Phoronix: CPU-bound, 83 MB WAV)"
}

func (w *Lame) cache(env *Env) (string, error) {
	return needCache(env, "lame-"+string(sizeOrSmall(env.Size)))
}

const (
	wavName = "song.wav"
	mp3Name = "song.mp3"
)

// lameArgs are the options of every encode: Phoronix's -h, and no
// progress output.
var lameArgs = []string{"-h", "--quiet"}

func (w *Lame) Prepare(ctx context.Context, env *Env) error {
	cdir, err := w.cache(env)
	if err != nil {
		return err
	}
	version := ""
	lame := lookProgram("lame", w.noPrograms)
	if lame != "" {
		if version, err = programVersion(ctx, lame, nil); err != nil {
			return err
		}
	}
	param := fmt.Sprintf("%d s", lameSeconds.pick(env.Size))
	if m, err := readMeta(cdir); err == nil && m.Param == param && m.Source == version && checkMeta(cdir, m) {
		w.inputs.meta, w.inputs.dir = m, cdir
		return nil
	}
	os.Remove(filepath.Join(cdir, metaName))
	wav := makeWAV(lameSeconds.pick(env.Size))
	if err := os.WriteFile(filepath.Join(cdir, wavName), wav, 0o644); err != nil {
		return err
	}
	sum := sha256.Sum256(wav)
	m := &cacheMeta{Param: param, Source: version, Files: map[string]string{wavName: hex.EncodeToString(sum[:])},
		Sizes: map[string]int64{wavName: int64(len(wav))}, Bytes: int64(len(wav))}
	if lame != "" {
		args := append(append([]string{lame}, lameArgs...), wavName, mp3Name)
		if _, _, err := (shellCmd{dir: cdir, script: `exec "$@"`, args: args}).run(ctx); err != nil {
			return fmt.Errorf("reference encode: %w", err)
		}
		mp3Sum, mp3Size, err := sha256File(filepath.Join(cdir, mp3Name))
		if err != nil {
			return err
		}
		m.Files[mp3Name], m.Sizes[mp3Name] = mp3Sum, mp3Size
	}
	if err := writeMeta(cdir, m); err != nil {
		return err
	}
	w.inputs.meta, w.inputs.dir = m, cdir
	return nil
}

// makeWAV returns a 16-bit stereo PCM WAV of the given length: two sine
// chords whose loudness drifts, and a little deterministic noise, so that
// the encoder has real work on every frame.
func makeWAV(seconds int) []byte {
	frames := seconds * wavRate
	dataSize := frames * wavChannels * 2
	b := make([]byte, wavHeader+dataSize)
	copy(b, "RIFF")
	binary.LittleEndian.PutUint32(b[4:], uint32(36+dataSize))
	copy(b[8:], "WAVEfmt ")
	binary.LittleEndian.PutUint32(b[16:], 16)
	binary.LittleEndian.PutUint16(b[20:], 1) // PCM
	binary.LittleEndian.PutUint16(b[22:], wavChannels)
	binary.LittleEndian.PutUint32(b[24:], wavRate)
	binary.LittleEndian.PutUint32(b[28:], wavRate*wavChannels*2)
	binary.LittleEndian.PutUint16(b[32:], wavChannels*2)
	binary.LittleEndian.PutUint16(b[34:], 16)
	copy(b[36:], "data")
	binary.LittleEndian.PutUint32(b[40:], uint32(dataSize))
	noise := uint32(1)
	for i := 0; i < frames; i++ {
		t := float64(i) / wavRate
		env := 0.6 + 0.4*math.Sin(2*math.Pi*0.25*t)
		noise = noise*1664525 + 1013904223
		n := float64(int32(noise)>>20) / 4
		l := env*(7000*math.Sin(2*math.Pi*440*t)+3500*math.Sin(2*math.Pi*554.37*t)+2000*math.Sin(2*math.Pi*659.25*t)) + n
		r := env*(6000*math.Sin(2*math.Pi*329.63*t)+4000*math.Sin(2*math.Pi*493.88*t)) - n
		binary.LittleEndian.PutUint16(b[wavHeader+i*4:], uint16(int16(l)))
		binary.LittleEndian.PutUint16(b[wavHeader+i*4+2:], uint16(int16(r)))
	}
	return b
}

func (w *Lame) Run(ctx context.Context, dir string, env *Env) (Result, error) {
	defer lockThread()()
	m, cdir, err := w.inputs.load(env, w.cache)
	if err != nil {
		return Result{}, err
	}
	wavPath := filepath.Join(dir, wavName)
	if err := copyFileSync(filepath.Join(cdir, wavName), wavPath); err != nil {
		return Result{}, fmt.Errorf("copy the WAV onto the target: %w", err)
	}
	if err := dropPathCache(wavPath); err != nil {
		return Result{}, err
	}
	wavSize := m.Sizes[wavName]
	var res Result
	lame := lookProgram("lame", w.noPrograms)
	if lame != "" && m.Files[mp3Name] == "" {
		return Result{}, fmt.Errorf("lame is installed but the cache has no reference MP3: run Prepare again")
	}
	if lame != "" {
		args := append(append([]string{lame}, lameArgs...), wavName, mp3Name)
		res.Wall, res.WorkloadCPU, err = shellCmd{dir: dir, script: `exec "$@"`, args: args}.run(ctx)
		if err != nil {
			return Result{}, err
		}
		verifyHook("lame.encoded", dir)
		got, size, err := sha256Cold(filepath.Join(dir, mp3Name))
		if err != nil {
			return Result{}, fmt.Errorf("verify: %w", err)
		}
		if got != m.Files[mp3Name] || size != m.Sizes[mp3Name] {
			return Result{}, fmt.Errorf("verify: %s: %d bytes, sha256 %s; the reference encode in the cache: %d bytes, %s: %w",
				mp3Name, size, got, m.Sizes[mp3Name], m.Files[mp3Name], errContent)
		}
		if err := removeAndCheck(dir, wavName, mp3Name); err != nil {
			return Result{}, err
		}
		res.Bytes = wavSize + size
		appendNote(&res, "lame: %s", strings.TrimSpace(strings.Split(m.Source, "(")[0]))
	} else {
		const zName = "song.wav.deflate"
		appendNote(&res, "lame not installed: Go compress/flate -9 stand-in")
		var sw stopwatch
		var zSize int64
		if _, err := sw.lap(func() (err error) {
			zSize, err = deflateFile(wavPath, filepath.Join(dir, zName))
			return err
		}); err != nil {
			return Result{}, err
		}
		res.Wall, res.WorkloadCPU = sw.wall, sw.cpu
		verifyHook("lame.encoded", dir)
		if err := verifyDeflate(filepath.Join(dir, zName), m.Files[wavName]); err != nil {
			return Result{}, err
		}
		if err := removeAndCheck(dir, wavName, zName); err != nil {
			return Result{}, err
		}
		res.Bytes = wavSize + zSize
	}
	res.Ops, res.Verified = 1, true
	res.Metrics = map[string]float64{"MiBps": mibps(wavSize, res.Wall)}
	return res, nil
}

// deflateFile compresses src into dst with flate level 9 and returns the
// size of dst.
func deflateFile(src, dst string) (int64, error) {
	in, err := os.Open(src)
	if err != nil {
		return 0, err
	}
	defer in.Close()
	out, err := os.Create(dst)
	if err != nil {
		return 0, err
	}
	// Buffered like an application's stdio: flate alone would hand the
	// file every small block it emits.
	cw := &byteCounter{w: out}
	bw := bufio.NewWriterSize(cw, 32<<10)
	zw, _ := flate.NewWriter(bw, flate.BestCompression)
	if _, err := io.Copy(zw, in); err != nil {
		out.Close()
		return 0, err
	}
	if err := zw.Close(); err != nil {
		out.Close()
		return 0, err
	}
	if err := bw.Flush(); err != nil {
		out.Close()
		return 0, err
	}
	return cw.n, out.Close()
}

// verifyDeflate inflates p (its cached pages dropped) and compares the
// SHA-256 of the result with want.
func verifyDeflate(p, want string) error {
	f, err := os.Open(p)
	if err != nil {
		return err
	}
	defer f.Close()
	dropFileCache(f)
	h := sha256.New()
	zr := flate.NewReader(bufio.NewReader(f))
	if _, err := io.Copy(h, zr); err != nil {
		return fmt.Errorf("verify: inflate %s: %w", filepath.Base(p), err)
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != want {
		return fmt.Errorf("verify: inflated %s: sha256 %s, the WAV's is %s: %w", filepath.Base(p), got, want, errContent)
	}
	return nil
}
