package metrics

import (
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/twincrypt/twincrypt/measure"
)

func TestCheckAddr(t *testing.T) {
	for _, c := range []struct {
		addr   string
		remote bool
		ok     bool
	}{
		{"127.0.0.1:9101", false, true},
		{"127.8.9.10:9101", false, true},
		{"[::1]:9101", false, true},
		{"localhost:9101", false, true},
		{"0.0.0.0:9101", false, false},
		{":9101", false, false},
		{"[::]:9101", false, false},
		{"192.0.2.1:9101", false, false},
		{"example.com:9101", false, false},
		{"0.0.0.0:9101", true, true},
		{"127.0.0.1", false, false},
		{"127.0.0.1:", false, false},
	} {
		err := CheckAddr(c.addr, c.remote)
		if (err == nil) != c.ok {
			t.Errorf("CheckAddr(%q, %v) = %v", c.addr, c.remote, err)
		}
		if !c.ok && strings.Contains(c.addr, "9101") && !errors.Is(err, ErrNotLoopback) {
			t.Errorf("CheckAddr(%q): %v, want ErrNotLoopback", c.addr, err)
		}
	}
}

// TestCollectorSeries: a recorder's spans come out as the documented
// series, with the histogram's buckets, count and sum those of the
// snapshot, errors by errno, the twin side, and no op-log series without
// an op log. The collector is also checked for consistency (pedantic).
func TestCollectorSeries(t *testing.T) {
	r := measure.NewRecorder("/mnt/v")
	for i := 0; i < 10; i++ {
		s := r.Start(measure.OpWrite, 1)
		s.SetIO(0, 4096)
		s.AddCrypto(time.Microsecond)
		s.SetTwin(measure.Part{Total: time.Microsecond}, 0)
		s.End(0)
	}
	r.Start(measure.OpLookup, 1).End(syscall.ENOENT)
	snap := r.Snapshot()
	snap.CPUUserS = 0.5
	var sb strings.Builder
	if err := WriteText(&sb, snap); err != nil {
		t.Fatal(err)
	}
	text := sb.String()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(strings.NewReader(text))
	if err != nil {
		t.Fatalf("%v\n%s", err, text)
	}
	for _, want := range []string{
		`twincrypt_op_duration_seconds_count{mount="/mnt/v",op="write",side="mount"} 10`,
		`twincrypt_op_duration_seconds_count{mount="/mnt/v",op="write",side="twin"} 10`,
		`twincrypt_op_bytes_total{mount="/mnt/v",op="write",side="mount"} 40960`,
		`twincrypt_op_errors_total{errno="ENOENT",mount="/mnt/v",op="lookup",side="mount"} 1`,
		`twincrypt_daemon_cpu_seconds_total{mode="user",mount="/mnt/v"} 0.5`,
		`twincrypt_op_crypto_seconds_total{mount="/mnt/v",op="write",side="mount"} 1e-05`,
		`twincrypt_op_duration_seconds_bucket{mount="/mnt/v",op="write",side="twin",le="1e-06"} 10`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("exposition lacks %s:\n%s", want, text)
		}
	}
	if fams["twincrypt_oplog_lines_total"] != nil {
		t.Errorf("op log series without an op log")
	}
	n, err := testutil.GatherAndCount(mustRegistry(t, snap))
	if err != nil || n == 0 {
		t.Errorf("pedantic gather: %d series, %v", n, err)
	}
}

func mustRegistry(t *testing.T, s measure.Snapshot) *prometheus.Registry {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(NewCollector(func() measure.Snapshot { return s })); err != nil {
		t.Fatal(err)
	}
	return reg
}

// dashboardPath is the Grafana dashboard shipped in docs/.
const dashboardPath = "../../docs/grafana/twincrypt-dashboard.json"

// TestDashboardNamesOurSeries decodes the Grafana dashboard and checks
// that every twincrypt_ or process_ series its queries name is one the
// metrics endpoint serves (a renamed metric breaks the dashboard), that
// panel ids are unique and that every panel has a query.
func TestDashboardNamesOurSeries(t *testing.T) {
	b, err := os.ReadFile(dashboardPath)
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			ID      int    `json:"id"`
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatalf("%s: %v", dashboardPath, err)
	}
	srv, err := Listen(Options{Addr: "127.0.0.1:0"}, func() measure.Snapshot {
		r := measure.NewRecorder("/m")
		r.Start(measure.OpLookup, 1).End(syscall.ENOENT)
		s := r.Snapshot()
		s.CPUUserS = 1
		return s
	})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	resp, err := http.Get("http://" + srv.Addr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	served := map[string]bool{}
	for name, f := range fams {
		served[name] = true
		if f.GetType() == dto.MetricType_HISTOGRAM {
			for _, suffix := range []string{"_bucket", "_count", "_sum"} {
				served[name+suffix] = true
			}
		}
	}
	// Series that need an op log or a mirror, absent from this mount.
	served["twincrypt_oplog_lines_total"] = true
	served["twincrypt_oplog_dropped_total"] = true
	names := regexp.MustCompile(`\b(?:twincrypt|process)_[a-z_]+\b`)
	ids := map[int]bool{}
	if len(dash.Panels) == 0 {
		t.Fatal("no panels")
	}
	for _, p := range dash.Panels {
		if ids[p.ID] {
			t.Errorf("panel id %d twice", p.ID)
		}
		ids[p.ID] = true
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			for _, n := range names.FindAllString(tg.Expr, -1) {
				if !served[n] {
					t.Errorf("panel %q queries %s, which /metrics does not serve", p.Title, n)
				}
			}
		}
	}
}

// TestDashboardInputsUsed: every variable the dashboard refers to
// ("${name}" or "$name") is one it declares, as a templating variable or
// an import input, and every input it declares is used: Grafana asks at
// import for each input, and one nothing refers to is a question whose
// answer goes nowhere.
func TestDashboardInputsUsed(t *testing.T) {
	b, err := os.ReadFile(dashboardPath)
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Inputs []struct {
			Name string `json:"name"`
		} `json:"__inputs"`
		Templating struct {
			List []struct {
				Name string `json:"name"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatal(err)
	}
	declared := map[string]bool{}
	for _, v := range dash.Templating.List {
		declared[v.Name] = true
	}
	used := map[string]bool{}
	for _, m := range regexp.MustCompile(`\$\{?([A-Za-z_][A-Za-z0-9_]*)`).FindAllStringSubmatch(string(b), -1) {
		used[m[1]] = true
	}
	for _, in := range dash.Inputs {
		if !used[in.Name] {
			t.Errorf("input %s is declared but nothing refers to it", in.Name)
		}
		declared[in.Name] = true
	}
	// Grafana's own variables.
	for _, g := range []string{"__interval", "__rate_interval", "__range", "__name__"} {
		declared[g] = true
	}
	for name := range used {
		if !declared[name] {
			t.Errorf("the dashboard refers to $%s, which it does not declare", name)
		}
	}
	if !used["datasource"] || !used["mount"] {
		t.Errorf("the queries use neither $datasource nor $mount: %v", used)
	}
}
