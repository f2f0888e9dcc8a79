package bench

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"time"
)

// The files WriteOutputs writes into the --out directory.
const (
	ReportFile  = "report.md"
	CSVFile     = "results.csv"
	JSONFile    = "results.json"
	OverheadSVG = "overhead.svg"
	OverheadPNG = "overhead.png"
	LatencySVG  = "latency.svg"
	LatencyPNG  = "latency.png"
)

// WriteOutputs writes report.md, results.csv, results.json and the charts
// into dir (created if needed) and returns the files written. A chart
// without data (no native target, no FUSE target) is left out.
func WriteOutputs(dir string, res *Results) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	var written []string
	var errs []error
	write := func(name string, f func(io.Writer) error) {
		var b bytes.Buffer
		if err := f(&b); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", name, err))
			return
		}
		if err := os.WriteFile(filepath.Join(dir, name), b.Bytes(), 0o644); err != nil {
			errs = append(errs, err)
			return
		}
		written = append(written, name)
	}
	charts, err := WriteCharts(dir, res)
	if err != nil {
		errs = append(errs, err)
	}
	write(JSONFile, func(w io.Writer) error { return WriteJSON(w, res) })
	write(CSVFile, func(w io.Writer) error { return WriteCSV(w, res) })
	if len(res.Traced) > 0 {
		write(TraceFile, func(w io.Writer) error { return WriteTraceCSV(w, res) })
		tc, err := writeSyscallsChart(dir, res)
		if err != nil {
			errs = append(errs, err)
		}
		charts = append(charts, tc...)
	}
	write(ReportFile, func(w io.Writer) error { return WriteReport(w, res, charts) })
	return append(written, charts...), errors.Join(errs...)
}

// WriteJSON writes res as one indented JSON document (results.json).
func WriteJSON(w io.Writer, res *Results) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(res)
}

// ReadResults reads a results.json.
func ReadResults(path string) (*Results, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var res Results
	if err := json.Unmarshal(data, &res); err != nil {
		return nil, fmt.Errorf("%s: not a bench results.json: %w", path, err)
	}
	if res.Version != ResultsVersion {
		return nil, fmt.Errorf("%s: results version %d, this twincrypt reads version %d", path, res.Version, ResultsVersion)
	}
	return &res, nil
}

// CSVHeader is the header of results.csv: one row per target × workload
// × repeat. Latencies are µs; metrics is the workload's Metrics as JSON.
var CSVHeader = []string{
	"target", "workload", "repeat", "ok", "skipped", "verified",
	"wall_s", "bytes", "ops", "mib_per_s", "workload_cpu_s", "daemon_cpu_s",
	"read_p50_us", "read_p99_us", "write_p50_us", "write_p99_us",
	"lookup_p50_us", "lookup_p99_us", "create_p50_us", "create_p99_us",
	"metrics", "note", "error",
}

// WriteCSV writes results.csv.
func WriteCSV(w io.Writer, res *Results) error {
	cw := csv.NewWriter(w)
	if err := cw.Write(CSVHeader); err != nil {
		return err
	}
	f := func(x float64) string { return strconv.FormatFloat(x, 'g', 6, 64) }
	for _, r := range res.Runs {
		mibps := ""
		if r.WallS > 0 && r.Bytes > 0 {
			mibps = f(float64(r.Bytes) / (1 << 20) / r.WallS)
		}
		row := []string{
			r.Target, r.Workload, strconv.Itoa(r.Repeat), strconv.FormatBool(r.OK()),
			strconv.FormatBool(r.Skipped), strconv.FormatBool(r.Verified),
			f(r.WallS), strconv.FormatInt(r.Bytes, 10), strconv.FormatInt(r.Ops, 10), mibps,
			f(r.WorkloadCPUS), f(r.DaemonCPUS),
		}
		for _, op := range latencyOps {
			p50, p99 := "", ""
			if r.Stats != nil {
				for _, s := range r.Stats.Ops {
					if s.Op == op {
						p50, p99 = f(float64(s.P50Ns)/1e3), f(float64(s.P99Ns)/1e3)
					}
				}
			}
			row = append(row, p50, p99)
		}
		metrics := ""
		if len(r.Metrics) > 0 {
			b, err := json.Marshal(r.Metrics) // keys sorted
			if err != nil {
				return err
			}
			metrics = string(b)
		}
		row = append(row, metrics, oneLine(r.Note), oneLine(r.Error))
		if err := cw.Write(row); err != nil {
			return err
		}
	}
	cw.Flush()
	return cw.Error()
}

// WriteReport writes report.md: the machine, the set-up, every table of
// WriteSummary, the charts (by file name), failures and notes.
func WriteReport(w io.Writer, res *Results, charts []string) error {
	m := res.Machine
	yes := func(b bool) string {
		if b {
			return "yes"
		}
		return "no"
	}
	fmt.Fprintf(w, "# twincrypt bench, %s\n\n", res.Started.Format(time.RFC1123))
	if res.Interrupted {
		fmt.Fprint(w, "**Interrupted**: the tables hold the runs that finished.\n\n")
	}
	fmt.Fprint(w, "## Machine\n\n")
	fmt.Fprintf(w, "- CPU: %s, %d cores\n", m.CPU, m.Cores)
	fmt.Fprintf(w, "- AES-NI: %s; VAES: %s; AVX-512 VAES: %s\n", yes(m.AESNI), yes(m.VAES), yes(m.AVX512VAES))
	if m.CipherPath != "" {
		fmt.Fprintf(w, "- Cipher path: %s\n", m.CipherPath)
	}
	fmt.Fprintf(w, "- Memory: %.1f GiB\n", m.MemoryGiB)
	fmt.Fprintf(w, "- Kernel: Linux %s\n", m.Kernel)
	fmt.Fprintf(w, "- Go: %s\n", m.Go)
	if m.Twincrypt != "" {
		fmt.Fprintf(w, "- twincrypt: %s\n", m.Twincrypt)
	}
	fmt.Fprint(w, "\n## Set-up\n\n")
	fmt.Fprintf(w, "- Date: %s to %s (%s)\n", res.Started.Format(time.RFC3339), res.Finished.Format(time.RFC3339),
		res.Finished.Sub(res.Started).Round(time.Second))
	fmt.Fprintf(w, "- Size: %s; repeats: %d, targets interleaved within each repeat, each repeat starting one target later; every run starts after a syncfs of the work filesystem, mounts, runs cold in a fresh directory and unmounts\n", res.Size, res.Repeat)
	if res.RepeatRule != "" {
		fmt.Fprintf(w, "- Repeats: %s\n", res.RepeatRule)
	}
	fmt.Fprintf(w, "- Ratios: %s\n", IntervalMethod)
	fmt.Fprintf(w, "- Lower data of every target on: %s\n", res.Lower)
	if v := res.dmcryptVariant(); v != "" {
		fmt.Fprintf(w, "- dm-crypt: %s; LUKS2, %s, %d-bit key, %d-byte sectors, ext4 on top\n", v, dmCipher, dmKeyBits, dmSectorSize)
	}
	for _, t := range res.Targets {
		if t.SetupError != "" {
			fmt.Fprintf(w, "- Target %s: **setup failed**: %s\n", t.Name, oneLine(t.SetupError))
		}
		if t.Note != "" {
			fmt.Fprintf(w, "- Target %s: %s\n", t.Name, t.Note)
		}
	}
	fmt.Fprintf(w, "- Targets: %s\n", joinOr(res.targetNames(), "none"))
	for _, s := range res.Skipped {
		fmt.Fprintf(w, "- Skipped %s: %s\n", s.Name, s.Reason)
	}
	fmt.Fprint(w, "\n| workload | what it does |\n|---|---|\n")
	for _, wl := range res.Workloads {
		d := wl.Describe
		if wl.PrepareError != "" {
			d += " — **prepare failed**: " + oneLine(wl.PrepareError)
		}
		fmt.Fprintf(w, "| %s | %s |\n", wl.Name, d)
	}
	fmt.Fprint(w, "\n## Results\n\n")
	for _, t := range res.tables() {
		t.markdown(w)
	}
	if len(charts) > 0 {
		fmt.Fprint(w, "## Charts\n\n")
		for _, c := range charts {
			if filepath.Ext(c) == ".svg" {
				fmt.Fprintf(w, "![%s](%s)\n\n", c, c)
			}
		}
	}
	WriteTraceReport(w, res)
	fmt.Fprint(w, "## Failures\n\n")
	if f := res.failures(); len(f) > 0 {
		for _, l := range f {
			fmt.Fprintf(w, "- %s\n", l)
		}
	} else {
		fmt.Fprint(w, "None.\n")
	}
	if n := res.notes(); len(n) > 0 {
		fmt.Fprint(w, "\n## Notes\n\n")
		for _, l := range n {
			fmt.Fprintf(w, "- %s\n", l)
		}
	}
	fmt.Fprintf(w, "\nEvery run is in %s (one row per target × workload × repeat) and %s (everything, including the per-op statistics).\n", CSVFile, JSONFile)
	return nil
}

func joinOr(s []string, none string) string {
	if len(s) == 0 {
		return none
	}
	out := s[0]
	for _, x := range s[1:] {
		out += ", " + x
	}
	return out
}
