package bench

import (
	"bytes"
	"strings"
	"testing"
)

func TestCompare(t *testing.T) {
	old := sampleResults()
	cur := sampleResults()
	// crypt-xts got twice as fast on seqwrite (its time halved: MiB/s
	// doubled); twin's srctree moved within its spread.
	for i := range cur.Runs {
		r := &cur.Runs[i]
		switch {
		case r.Target == "crypt-xts" && r.Workload == "seqwrite":
			r.WallS /= 2
		case r.Target == "twin" && r.Workload == "srctree":
			r.WallS *= 1.05
		case r.Target == "native" && r.Workload == "srctree":
			r.WallS *= 3
		}
	}
	changes := Compare(old, cur)
	find := func(target, workload, key string) Change {
		for _, c := range changes {
			if c.Target == target && c.Workload == workload && c.Metric.Key == key {
				return c
			}
		}
		t.Fatalf("no change for %s %s %s", target, workload, key)
		return Change{}
	}
	if c := find("crypt-xts", "seqwrite", "MiBps"); !c.Flagged || c.Worse || c.Ratio != 2 {
		t.Errorf("crypt-xts seqwrite: %+v, want flagged better, ratio 2", c)
	}
	if c := find("twin", "srctree", "wall_s"); c.Flagged {
		t.Errorf("twin srctree within the spread flagged: %+v", c)
	}
	if c := find("native", "srctree", "wall_s"); !c.Flagged || !c.Worse {
		t.Errorf("native srctree 3x slower: %+v", c)
	}
	if c := find("native", "seqwrite", "MiBps"); c.Flagged || c.Ratio != 1 {
		t.Errorf("unchanged: %+v", c)
	}
	// The sub-metrics are compared too (they did not change here).
	if c := find("twin", "srctree", "untar_s"); c.Flagged {
		t.Errorf("untar: %+v", c)
	}
	var b bytes.Buffer
	cur.Targets = cur.Targets[:3] // dmcrypt only in old
	WriteCompare(&b, old, cur, Compare(old, cur))
	out := b.String()
	t.Logf("\n%s", out)
	for _, s := range []string{"new/old", "crypt-xts  MiB/s", "2.00x  BETTER", "3.00x   WORSE", "2 of ", "only in old: target dmcrypt-userspace"} {
		if !strings.Contains(out, s) {
			t.Errorf("compare output lacks %q", s)
		}
	}
}
