package bench

import (
	"bytes"
	"encoding/csv"
	"image/png"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/twincrypt/twincrypt/cipher/sector"
	"github.com/twincrypt/twincrypt/measure"
)

// sampleResults is a small finished bench: three targets, two workloads,
// three repeats, per-op statistics on the FUSE targets, one failed run.
func sampleResults() *Results {
	t0 := time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)
	res := &Results{
		Version: ResultsVersion, Started: t0, Finished: t0.Add(3 * time.Minute),
		Size: SizeTiny, Repeat: 3, Lower: "tmpfs (dedicated, 1.0 GiB)",
		Machine: Machine{CPU: "Test CPU", Cores: 2, MemoryGiB: 8, AESNI: true, Kernel: "6.1.0", Go: "go1.26"},
		Targets: []TargetInfo{{Name: "native"}, {Name: "twin"}, {Name: "crypt-xts"}, {Name: "dmcrypt-userspace"}},
		Skipped: []Skipped{{Name: "gocryptfs", Reason: "gocryptfs is not installed"}},
		Workloads: []WorkloadInfo{
			{Name: "seqwrite", Describe: "one file in 1 MiB writes", Headline: "MiBps"},
			{Name: "srctree", Describe: "untar, ls -lR, md5, rm -rf", Headline: "wall_s"},
		},
	}
	speed := map[string]float64{"native": 1, "twin": 3, "crypt-xts": 5, "dmcrypt-userspace": 4}
	for r := 1; r <= 3; r++ {
		for _, w := range res.Workloads {
			for _, tg := range res.Targets {
				run := Run{Target: tg.Name, Workload: w.Name, Repeat: r, Start: t0.Add(time.Duration(r) * time.Minute),
					WallS: speed[tg.Name] * (1 + 0.1*float64(r)), Bytes: 256 << 20, Ops: 256,
					WorkloadCPUS: 0.2 * speed[tg.Name], Verified: true}
				if tg.Name != "native" {
					run.DaemonCPUS = 0.1 * speed[tg.Name]
				}
				if w.Name == "srctree" {
					run.Metrics = map[string]float64{"untar_s": run.WallS / 2, "lsR_s": run.WallS / 8, "md5_s": run.WallS / 4, "rm_s": run.WallS / 8}
				}
				if tg.Name == "twin" || tg.Name == "crypt-xts" {
					f := int64(speed[tg.Name])
					run.Stats = &measure.Snapshot{Mount: "/m", Ops: []measure.Stats{
						{Op: "lookup", Count: 100, P50Ns: 2000 * f, P99Ns: 20000 * f},
						{Op: "create", Count: 10, P50Ns: 50000 * f, P99Ns: 90000 * f},
						{Op: "read", Count: 100, P50Ns: 30000 * f, P99Ns: 200000 * f, Bytes: 1 << 20},
						{Op: "write", Count: 100, P50Ns: 40000 * f, P99Ns: 300000 * f, Bytes: 1 << 20},
					}}
				}
				if tg.Name == "dmcrypt-userspace" && w.Name == "srctree" && r == 2 {
					run = Run{Target: tg.Name, Workload: w.Name, Repeat: r, Error: "md5 of a/b.c differs"}
				}
				res.Runs = append(res.Runs, run)
			}
		}
	}
	return res
}

func TestWriteOutputs(t *testing.T) {
	res := sampleResults()
	dir := t.TempDir()
	written, err := WriteOutputs(dir, res)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{JSONFile, CSVFile, ReportFile, OverheadSVG, OverheadPNG, LatencySVG, LatencyPNG}
	for _, name := range want {
		fi, err := os.Stat(filepath.Join(dir, name))
		if err != nil || fi.Size() == 0 {
			t.Errorf("%s: %v", name, err)
		}
	}
	if len(written) != len(want) {
		t.Errorf("written %q, want the %d files %q", written, len(want), want)
	}

	report, _ := os.ReadFile(filepath.Join(dir, ReportFile))
	md := string(report)
	for _, s := range []string{
		"# twincrypt bench", "## Machine", "- CPU: Test CPU, 2 cores", "AES-NI: yes", "Kernel: Linux 6.1.0", "Go: go1.26",
		"## Set-up", "Size: tiny; repeats: 3", "tmpfs (dedicated, 1.0 GiB)", "dm-crypt: dmcrypt-userspace; LUKS2, aes-xts-plain64",
		"Skipped gocryptfs: gocryptfs is not installed", "| seqwrite | one file in 1 MiB writes |",
		"## Results", "### Results: median (min–max) of 3 repeat(s)",
		"| workload | unit | native | twin | crypt-xts | dmcrypt-userspace |",
		"### Cost relative to native", "### Cost relative to twin",
		"### Workload CPU seconds per GiB", "### Daemon CPU seconds per GiB", "### Per-operation latency",
		"| &nbsp;&nbsp;untar | s |", "![overhead.svg](overhead.svg)", "![latency.svg](latency.svg)",
		"## Failures", "- srctree on dmcrypt-userspace, repeat 2: md5 of a/b.c differs",
	} {
		if !strings.Contains(md, s) {
			t.Errorf("report.md lacks %q", s)
		}
	}
	// seqwrite: native 256 MiB in 1.2 s (median of 1.1, 1.2, 1.3) = 213 MiB/s.
	if !strings.Contains(md, "| seqwrite | MiB/s | 213 (197–233) |") {
		t.Errorf("report.md: unexpected seqwrite row\n%s", md)
	}
	// Every repeat has the same ratio: an interval of no width.
	if !strings.Contains(md, "| seqwrite | 3.00x [3.00–3.00] | 5.00x [5.00–5.00] | 4.00x [4.00–4.00] |") {
		t.Errorf("report.md: ratio to native of seqwrite wrong\n%s", md)
	}
	if !strings.Contains(md, "Student's t on the logarithms of the per-repeat ratios") {
		t.Errorf("report.md does not state how the intervals are made\n%s", md)
	}

	f, _ := os.Open(filepath.Join(dir, CSVFile))
	defer f.Close()
	rows, err := csv.NewReader(f).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(rows[0], CSVHeader) || len(rows) != 1+len(res.Runs) {
		t.Fatalf("csv: header %q, %d rows for %d runs", rows[0], len(rows), len(res.Runs))
	}
	col := map[string]int{}
	for i, h := range rows[0] {
		col[h] = i
	}
	r1 := rows[2] // twin, seqwrite, repeat 1
	if r1[col["target"]] != "twin" || r1[col["wall_s"]] != "3.3" || r1[col["mib_per_s"]] != "77.5758" ||
		r1[col["read_p50_us"]] != "90" || r1[col["ok"]] != "true" {
		t.Errorf("csv row %q", r1)
	}
	var failed []string
	for _, r := range rows[1:] {
		if r[col["ok"]] == "false" {
			failed = append(failed, r[col["error"]])
		}
	}
	if !reflect.DeepEqual(failed, []string{"md5 of a/b.c differs"}) {
		t.Errorf("csv failed rows: %q", failed)
	}

	back, err := ReadResults(filepath.Join(dir, JSONFile))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back, res) {
		t.Errorf("results.json does not round-trip:\n got %+v\nwant %+v", back, res)
	}

	for _, name := range []string{OverheadPNG, LatencyPNG} {
		f, err := os.Open(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		img, err := png.Decode(f)
		f.Close()
		if err != nil {
			t.Errorf("%s: %v", name, err)
		} else if b := img.Bounds(); b.Dx() < 500 || b.Dy() < 200 {
			t.Errorf("%s: %v", name, b)
		}
	}
	for _, name := range []string{OverheadSVG, LatencySVG} {
		data, _ := os.ReadFile(filepath.Join(dir, name))
		if !bytes.Contains(data, []byte("<svg")) || !bytes.Contains(data, []byte("</svg>")) {
			t.Errorf("%s is not an SVG", name)
		}
	}
	svg, _ := os.ReadFile(filepath.Join(dir, OverheadSVG))
	for _, s := range []string{"crypt-xts", "dmcrypt-userspace", "seqwrite", "srctree"} {
		if !bytes.Contains(svg, []byte(s)) {
			t.Errorf("overhead chart lacks %q", s)
		}
	}
}

func TestReadResultsRejects(t *testing.T) {
	dir := t.TempDir()
	for name, content := range map[string]string{"garbage.json": "not json", "future.json": `{"version": 99}`} {
		p := filepath.Join(dir, name)
		os.WriteFile(p, []byte(content), 0o600)
		if _, err := ReadResults(p); err == nil {
			t.Errorf("%s accepted", name)
		}
	}
}

func TestSummaryTables(t *testing.T) {
	var b bytes.Buffer
	WriteSummary(&b, sampleResults(), 0)
	out := b.String()
	t.Logf("\n%s", out)
	for _, s := range []string{
		"twincrypt bench: size tiny, 3 repeat(s), lower data on tmpfs (dedicated, 1.0 GiB)",
		"machine: Test CPU, 2 cores, 8.0 GiB; AES-NI yes",
		"skipped gocryptfs: gocryptfs is not installed",
		"workload   unit               native                 twin            crypt-xts      dmcrypt-userspace\n",
		"seqwrite  MiB/s        213 (197–233)     71.1 (65.6–77.6)",
		"  lsR         s  0.150 (0.138–0.163)",
		"  untar       s",
		"srctree   lookup",
		"10.0 / 100",
		"Failures\n  srctree on dmcrypt-userspace, repeat 2: md5 of a/b.c differs",
	} {
		if !strings.Contains(out, s) {
			t.Errorf("summary lacks %q", s)
		}
	}
	// The failed repeat leaves two: the median of 4.4 and 5.2 is 4.8.
	if !strings.Contains(out, "4.80 (4.40–5.20) !") {
		t.Error("partial failure not shown as median of the rest with \"!\"")
	}
}

func TestSummaryPanels(t *testing.T) {
	var b bytes.Buffer
	WriteSummary(&b, sampleResults(), 80)
	out := b.String()
	// Table rows (not titles and notes, which are prose) fit in 80 columns.
	for _, l := range strings.Split(out, "\n") {
		if n := len([]rune(l)); n > 80 && strings.Contains(l, "  ") {
			t.Errorf("table line of %d columns in an 80-column summary: %q", n, l)
		}
	}
	// The results table is cut in two panels, each with the label columns.
	if n := strings.Count(out, "workload   unit"); n != 2 {
		t.Errorf("%d results panels, want 2:\n%s", n, out)
	}
	if !strings.Contains(out, "seqwrite  MiB/s        213 (197–233)     71.1 (65.6–77.6)     42.7 (39.4–46.5)\n") {
		t.Errorf("first panel:\n%s", out)
	}
}

// TestMachineNamesCipherPath: the machine record says which cipher code ran
// (a figure from the VAES path says little about a CPU without it), and the
// summary line and report.md print it.
func TestMachineNamesCipherPath(t *testing.T) {
	if got, want := DetectMachine().CipherPath, sector.Implementation(); got != want || got == "" {
		t.Fatalf("DetectMachine().CipherPath = %q, want %q", got, want)
	}
	res := sampleResults()
	res.Machine.CipherPath = "aesni (AES-NI assembly)"
	if l := res.Machine.line(); !strings.Contains(l, "cipher aesni (AES-NI assembly)") {
		t.Errorf("machine line %q does not name the cipher path", l)
	}
	var b bytes.Buffer
	if err := WriteReport(&b, res, nil); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "- Cipher path: aesni (AES-NI assembly)\n") {
		t.Errorf("report.md does not name the cipher path:\n%s", b.String())
	}
}

// TestPeerTable: each of our mounts against the best FUSE peer of each
// row, which may differ from row to row, with rates inverted; no table
// without a peer.
func TestPeerTable(t *testing.T) {
	if _, ok := sampleResults().peerTable(); ok {
		t.Error("a peer table without any peer in the results")
	}
	res := sampleResults()
	res.Targets = append(res.Targets, TargetInfo{Name: "gocryptfs"}, TargetInfo{Name: "securefs"})
	res.Skipped = nil
	// gocryptfs is the faster peer on seqwrite (wall 2 against 6: a
	// rate), securefs on srctree (wall 8 against 10), and securefs's
	// untar is slower than gocryptfs's (its untar_s 8 against 5).
	peerWall := map[string]map[string]float64{
		"gocryptfs": {"seqwrite": 2, "srctree": 10},
		"securefs":  {"seqwrite": 6, "srctree": 8},
	}
	untar := map[string]float64{"gocryptfs": 5, "securefs": 8}
	for _, p := range []string{"gocryptfs", "securefs"} {
		for r := 1; r <= 3; r++ {
			for _, w := range res.Workloads {
				run := Run{Target: p, Workload: w.Name, Repeat: r, WallS: peerWall[p][w.Name], Bytes: 256 << 20, Ops: 256, Verified: true}
				if w.Name == "srctree" {
					run.Metrics = map[string]float64{"untar_s": untar[p], "lsR_s": 1, "md5_s": 1, "rm_s": 1}
				}
				res.Runs = append(res.Runs, run)
			}
		}
	}
	tb, ok := res.peerTable()
	if !ok {
		t.Fatal("no peer table")
	}
	if got, want := strings.Join(tb.header, ","), "workload,best peer,twin,crypt-xts"; got != want {
		t.Errorf("header %q, want %q", got, want)
	}
	rows := map[string][]string{}
	for _, r := range tb.rows {
		rows[strings.TrimSpace(r[0])] = r[1:]
	}
	// twin's seqwrite walls are 3.3, 3.6, 3.9 against gocryptfs's 2 in
	// every repeat: ratios 1.65, 1.80, 1.95, geometric mean 1.80, and
	// the t-interval of their logs (t = 4.30 for 2 degrees of freedom),
	// worked out by hand; crypt-xts is 5/3 of the twin.
	for label, want := range map[string][]string{
		"seqwrite": {"gocryptfs", "1.80x [1.46–2.21]", "2.99x [2.43–3.68]"},
		"untar":    {"gocryptfs", "0.36x [0.29–0.44]", "0.60x [0.49–0.74]"},
		"srctree":  {"securefs", "0.45x [0.36–0.55]", "0.75x [0.61–0.92]"},
	} {
		var got []string
		for l, r := range rows {
			if strings.HasPrefix(l, label) {
				got = r
			}
		}
		if strings.Join(got, ",") != strings.Join(want, ",") {
			t.Errorf("%s row %q, want %q", label, got, want)
		}
	}
	var b bytes.Buffer
	WriteSummary(&b, res, 0)
	if !strings.Contains(b.String(), "Cost relative to the best FUSE peer of each row") {
		t.Errorf("summary lacks the peer table:\n%s", b.String())
	}
}
