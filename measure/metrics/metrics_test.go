package metrics

import (
	"errors"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
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
