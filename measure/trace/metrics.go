package trace

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/twincrypt/twincrypt/measure"
)

// The kernel-side series, beside the daemon's twincrypt_op_* ones (same
// mount label: the target's path, and the same buckets,
// measure.BucketBoundsNs), labelled by layer: "syscall" (the application's
// wait), "fuse" (the kernel's round trip) or "block".
var (
	kernelLabels = []string{"mount", "layer", "op"}
	descKernel   = prometheus.NewDesc("twincrypt_kernel_op_duration_seconds",
		"Latency of operations as the kernel sees them, by layer: syscall entry to exit, FUSE request to reply, block issue to completion.",
		kernelLabels, nil)
	descKernelErrors = prometheus.NewDesc("twincrypt_kernel_op_errors_total",
		"Operations the kernel saw fail, by layer.", kernelLabels, nil)
)

// Collector exposes a tracer's histograms to Prometheus: each scrape
// reads the kernel's maps once.
type Collector struct {
	snap func() (Snapshot, error)
}

// NewCollector collects from snap (a Tracer's Snapshot).
func NewCollector(snap func() (Snapshot, error)) *Collector { return &Collector{snap: snap} }

// Describe sends the descriptors of the series.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descKernel
	ch <- descKernelErrors
}

// Collect sends every series of a fresh snapshot.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	s, err := c.snap()
	if err != nil {
		ch <- prometheus.NewInvalidMetric(descKernel, err)
		return
	}
	for _, x := range s.Series {
		st := x.Stats()
		labels := []string{x.Target, x.Layer, x.Op}
		buckets := make(map[float64]uint64, len(measure.BucketBoundsNs))
		for i, bound := range measure.BucketBoundsNs {
			buckets[float64(bound)/1e9] = uint64(st.Buckets[i])
		}
		ch <- prometheus.MustNewConstHistogram(descKernel, uint64(st.Count), float64(st.TotalNs)/1e9, buckets, labels...)
		ch <- prometheus.MustNewConstMetric(descKernelErrors, prometheus.CounterValue, float64(st.Errors), labels...)
	}
}
