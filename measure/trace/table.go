package trace

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/twincrypt/twincrypt/measure"
)

// Table prints a window's series of one target: per layer and operation
// the count, errors, mean, p50, p99 and max the kernel saw.
func (s Snapshot) Table(w io.Writer, target string) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "%-8s\t%-16s\tcount\terrors\tmean\tp50\tp99\tmax\t\n", "layer", "op")
	n := 0
	for _, x := range s.Series {
		if x.Target != target {
			continue
		}
		st := x.Stats()
		fmt.Fprintf(tw, "%-8s\t%-16s\t%d\t%d\t%s\t%s\t%s\t%s\t\n", x.Layer, x.Op, x.Count, x.Errors,
			measure.HumanNs(int64(st.MeanNs)), measure.HumanNs(st.P50Ns), measure.HumanNs(st.P99Ns), measure.HumanNs(st.MaxNs))
		n++
	}
	if n == 0 {
		fmt.Fprintln(w, "no traced operation on", target)
		return
	}
	tw.Flush()
}

// Where is one FUSE opcode split into where its microseconds go: the
// kernel's round trip (request queued to reply), the daemon's handler
// (go-fuse hands it the request to the reply being ready) and of that
// crypto and lower-filesystem time; round trip minus handler is the
// transport and queueing (/dev/fuse or the ring, go-fuse, scheduling).
// Means over the same window, so the parts add up.
type Where struct {
	Op           string  `json:"op"`
	Requests     int64   `json:"requests"` // kernel's count
	Spans        int64   `json:"spans"`    // daemon's count
	RoundTripNs  float64 `json:"round_trip_ns"`
	RoundTripP50 int64   `json:"round_trip_p50_ns"`
	RoundTripP99 int64   `json:"round_trip_p99_ns"`
	HandlerNs    float64 `json:"handler_ns"`
	CryptoNs     float64 `json:"crypto_ns"`
	LowerNs      float64 `json:"lower_ns"`
	TransportNs  float64 `json:"transport_ns"` // round trip - handler
}

// WhereOf joins a window's FUSE series of target with the daemon's spans
// of the same window (measure.Deltas of two snapshots), opcode by op
// name. Opcodes the daemon has no span for (FORGET, INIT, directory
// listings, which it times per lower batch) have no handler figures.
func WhereOf(k Snapshot, target string, daemon []measure.Stats) []Where {
	byOp := map[string]measure.Stats{}
	for _, d := range daemon {
		byOp[d.Op] = d
	}
	var out []Where
	for _, x := range k.Series {
		if x.Layer != LayerFUSE || x.Target != target {
			continue
		}
		st := x.Stats()
		wh := Where{Op: x.Op, Requests: x.Count, RoundTripNs: st.MeanNs,
			RoundTripP50: st.P50Ns, RoundTripP99: st.P99Ns}
		if d, ok := byOp[strings.ToLower(x.Op)]; ok && d.Count > 0 && !listingOp(x.Op) {
			n := float64(d.Count)
			wh.Spans = d.Count
			wh.HandlerNs = float64(d.TotalNs) / n
			wh.CryptoNs = float64(d.CryptoNs) / n
			wh.LowerNs = float64(d.LowerNs) / n
			wh.TransportNs = wh.RoundTripNs - wh.HandlerNs
		}
		out = append(out, wh)
	}
	return out
}

// listingOp: the daemon's readdir span is a batch of the lower directory,
// not a request.
func listingOp(op string) bool {
	switch op {
	case "OPENDIR", "READDIR", "READDIRPLUS", "RELEASEDIR":
		return true
	}
	return false
}

// WhereTable prints WhereOf's rows.
func WhereTable(w io.Writer, rows []Where) {
	if len(rows) == 0 {
		fmt.Fprintln(w, "no FUSE request traced")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "%-12s\trequests\tround trip\tp50\tp99\thandler\tcrypto\tlower\ttransport+queue\t\n", "op")
	for _, r := range rows {
		h, c, l, tq := "-", "-", "-", "-"
		if r.Spans > 0 {
			h, c, l, tq = measure.HumanNs(int64(r.HandlerNs)), measure.HumanNs(int64(r.CryptoNs)),
				measure.HumanNs(int64(r.LowerNs)), signedNs(r.TransportNs)
		}
		fmt.Fprintf(tw, "%-12s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", r.Op, r.Requests,
			measure.HumanNs(int64(r.RoundTripNs)), measure.HumanNs(r.RoundTripP50), measure.HumanNs(r.RoundTripP99),
			h, c, l, tq)
	}
	tw.Flush()
	fmt.Fprintln(w, "means over the window; round trip: the kernel's, request queued to reply; handler: the daemon's span")
}

func signedNs(v float64) string {
	if v < 0 {
		return "-" + measure.HumanNs(int64(-v))
	}
	return measure.HumanNs(int64(v))
}
