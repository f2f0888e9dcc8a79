package report

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"errors"
	"image/png"
	"os"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/twincrypt/twincrypt/measure"
)

func TestWriteTableMirror(t *testing.T) {
	r := aggregate(t, Options{Top: 3}, encodeLog(t, mirrorLog()))
	var b bytes.Buffer
	if err := WriteTable(&b, r); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	t.Logf("\n%s", out)
	for _, want := range []string{
		"test.log: 1600 lines, 2026-11-30T10:00:00Z .. 2026-11-30T10:00:01.599Z (1.6 s), mirror mode",
		`mount "m"`,
		"op      count  errors     p50",
		// read: 100 µs everywhere, 990×4 KiB over 1.599 s = 2.4 MiB/s,
		// 30 % crypto, 40 % lower.
		"read     1000      10   100µs",
		"2.4     30.0    40.0",
		"encrypted vs twin",
		"×p50",
		"2.00   2.00  +50.0µs  +50.0µs",
		"create    100       0  1.00ms",
		"slowest 3 ops",
		"latency over time",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q", want)
		}
	}
	// One mount: no mount column.
	if strings.Contains(out, "mount  op") {
		t.Error("mount column printed for a single mount")
	}
}

func TestWriteTablePlainAndMultiMount(t *testing.T) {
	lines := []measure.LogLine{
		{TS: t0, Mount: "a", Op: "getattr", Ns: 3 * us},
		{TS: t0, Mount: "b", Op: "getattr", Ns: 4 * us},
	}
	r := aggregate(t, Options{}, encodeLog(t, lines))
	var b bytes.Buffer
	if err := WriteTable(&b, r); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	if strings.Contains(out, "twin") || strings.Contains(out, "mirror") {
		t.Errorf("twin columns without twin data:\n%s", out)
	}
	if !strings.Contains(out, "mount  op") || !strings.Contains(out, `mount "a", "b"`) {
		t.Errorf("two mounts, but no mount column:\n%s", out)
	}

	b.Reset()
	if err := WriteTable(&b, NewAggregator(Options{}).Report()); err != nil || !strings.Contains(b.String(), "no operations") {
		t.Errorf("empty report: %v\n%s", err, b.String())
	}
}

func TestFmtNs(t *testing.T) {
	for ns, want := range map[int64]string{
		0: "0", 850: "850ns", 1000: "1.00µs", 12_345: "12.3µs", 99_970: "100µs", 123_456: "123µs",
		999_499: "999µs", 999_500: "1.00ms", 2_500_000: "2.50ms", 3_200_000_000: "3.20s",
	} {
		if got := fmtNs(ns); got != want {
			t.Errorf("fmtNs(%d) = %q, want %q", ns, got, want)
		}
	}
}

func TestWriteCSV(t *testing.T) {
	r := aggregate(t, Options{}, encodeLog(t, mirrorLog()))
	var b bytes.Buffer
	if err := WriteCSV(&b, r); err != nil {
		t.Fatal(err)
	}
	rows, err := csv.NewReader(&b).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(rows[0], CSVHeader) {
		t.Errorf("header %q", rows[0])
	}
	if len(rows) != 1+3 {
		t.Fatalf("%d rows, want header + 3", len(rows))
	}
	col := func(row []string, name string) string {
		for i, h := range CSVHeader {
			if h == name {
				return row[i]
			}
		}
		t.Fatalf("no column %s", name)
		return ""
	}
	read := rows[1]
	if col(read, "op") != "read" || col(read, "count") != "1000" || col(read, "errors") != "10" ||
		col(read, "bytes") != strconv.Itoa(990*4096) || col(read, "class") != "data" || col(read, "ratio_mean") != "2" {
		t.Errorf("read row %q", read)
	}
	if p50, _ := strconv.ParseFloat(col(read, "twin_p50_ns"), 64); !near(p50, float64(50*us), 1e-3) {
		t.Errorf("twin_p50_ns %v", p50)
	}

	// Without twin data the twin columns are there, and empty.
	r = aggregate(t, Options{}, encodeLog(t, []measure.LogLine{{TS: t0, Mount: "m", Op: "read", Ns: 1}}))
	b.Reset()
	WriteCSV(&b, r)
	rows, _ = csv.NewReader(&b).ReadAll()
	if len(rows) != 2 || len(rows[1]) != len(CSVHeader) || col(rows[1], "twin_p50_ns") != "" || col(rows[1], "ratio_p50") != "" {
		t.Errorf("plain rows %q", rows)
	}
}

func TestWriteJSONRoundTrip(t *testing.T) {
	for _, lines := range [][]measure.LogLine{mirrorLog(), {{TS: t0, Mount: "m", Op: "read", Ns: 1}}} {
		data := append(encodeLog(t, lines), "garbage\n"...)
		r := aggregate(t, Options{}, data)
		var b bytes.Buffer
		if err := WriteJSON(&b, r); err != nil {
			t.Fatal(err)
		}
		first := b.String()
		var back Report
		if err := json.Unmarshal(b.Bytes(), &back); err != nil {
			t.Fatalf("decode: %v\n%s", err, first)
		}
		b.Reset()
		WriteJSON(&b, &back)
		if b.String() != first {
			t.Errorf("JSON does not round-trip:\n%s\nvs\n%s", first, b.String())
		}
		if back.Lines != r.Lines || back.Malformed != 1 || len(back.Ops) != len(r.Ops) ||
			!reflect.DeepEqual(back.Ops, r.Ops) || len(back.Slowest) != len(r.Slowest) ||
			len(back.Timeline.Buckets) != len(r.Timeline.Buckets) || len(back.CDF) != len(r.CDF) {
			t.Errorf("decoded report differs: %+v", back)
		}
	}
}

func TestCharts(t *testing.T) {
	mirror := aggregate(t, Options{}, encodeLog(t, mirrorLog()))
	plain := aggregate(t, Options{}, encodeLog(t, []measure.LogLine{
		{TS: t0, Mount: "m", Op: "read", Ns: 1}, // 1 ns: the smallest a log axis must show
		{TS: t0, Mount: "m", Op: "mkdir", Ns: 2_000_000_000},
	}))
	for _, tc := range []struct {
		name string
		r    *Report
	}{{"mirror", mirror}, {"plain", plain}} {
		for _, ext := range []string{"svg", "png", "pdf"} {
			for _, chart := range []struct {
				name  string
				write func(*Report, string) error
			}{{"cdf", WriteCDFChart}, {"time", WriteTimeChart}} {
				path := tempPath(t, chart.name+"."+ext)
				if err := chart.write(tc.r, path); err != nil {
					t.Errorf("%s %s %s: %v", tc.name, chart.name, ext, err)
					continue
				}
				checkChart(t, path, ext)
			}
		}
	}
}

func checkChart(t *testing.T, path, ext string) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(data) < 1000 {
		t.Errorf("%s: only %d bytes", path, len(data))
	}
	switch ext {
	case "svg":
		s := string(data)
		if !(strings.HasPrefix(s, "<?xml") || strings.HasPrefix(s, "<svg")) || !strings.Contains(s, "</svg>") {
			t.Errorf("%s is not SVG: %.80q", path, s)
		}
		if !strings.Contains(s, "Latency") {
			t.Errorf("%s: no title", path)
		}
	case "png":
		img, err := png.Decode(bytes.NewReader(data))
		if err != nil {
			t.Errorf("%s: %v", path, err)
		} else if b := img.Bounds(); b.Dx() < 300 || b.Dy() < 200 {
			t.Errorf("%s: %v", path, b)
		}
	case "pdf":
		if !bytes.HasPrefix(data, []byte("%PDF-")) {
			t.Errorf("%s is not PDF: %.20q", path, data)
		}
	}
}

func TestChartErrors(t *testing.T) {
	r := aggregate(t, Options{}, encodeLog(t, mirrorLog()))
	for _, bad := range []string{"out.gif", "out", "out.svg.txt"} {
		if err := CheckChartPath(bad); !errors.Is(err, ErrChartFormat) {
			t.Errorf("CheckChartPath(%q) = %v", bad, err)
		}
		if err := WriteCDFChart(r, tempPath(t, bad)); !errors.Is(err, ErrChartFormat) {
			t.Errorf("WriteCDFChart(%q) = %v", bad, err)
		}
	}
	if err := CheckChartPath("OUT.SVG"); err != nil {
		t.Errorf("upper-case extension: %v", err)
	}
	empty := NewAggregator(Options{}).Report()
	path := tempPath(t, "empty.svg")
	if err := WriteCDFChart(empty, path); err == nil {
		t.Error("chart of nothing: no error")
	}
	if err := WriteTimeChart(empty, path); err == nil {
		t.Error("time chart of nothing: no error")
	}
	if _, err := os.Stat(path); err == nil {
		t.Error("a failed chart left a file behind")
	}
}
