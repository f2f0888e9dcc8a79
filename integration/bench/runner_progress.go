package bench

import (
	"fmt"
	"io"
	"strings"
	"sync"
	"time"
)

// Progress is told what the runner does, as it happens.
type Progress interface {
	// Phase is a preparatory step (setting up a target, preparing a
	// workload's inputs).
	Phase(msg string)
	// Skip reports a target left out, with the reason.
	Skip(target, reason string)
	// Warn reports a problem that does not stop the bench.
	Warn(msg string)
	// Step reports a set-up step done (a target set up, the targets
	// found, the workloads prepared): one permanent line.
	Step(msg string)
	// ETA reports, after each repeat but the last, how long the rest of
	// the bench should take: the average repeat so far times the repeats
	// left.
	ETA(repeat, repeats int, took, left time.Duration)
	// Estimate reports how long the rest of the bench should take: from
	// the start (before any run, from a cost model) and after every run.
	// A non-empty how asks for a line saying so; otherwise only the live
	// line shows it.
	Estimate(left time.Duration, how string)
	// Start and Done bracket run n of total (1-based).
	Start(run Run, n, total int)
	Done(run Run, n, total int)
}

type nopProgress struct{}

func (nopProgress) Phase(string)                               {}
func (nopProgress) Skip(string, string)                        {}
func (nopProgress) Warn(string)                                {}
func (nopProgress) Step(string)                                {}
func (nopProgress) ETA(int, int, time.Duration, time.Duration) {}
func (nopProgress) Estimate(time.Duration, string)             {}
func (nopProgress) Start(Run, int, int)                        {}
func (nopProgress) Done(Run, int, int)                         {}

// TermProgress prints one line per run. On a terminal (live) the line of
// the run in progress is redrawn ten times a second with a progress bar,
// a spinner and the elapsed time, and replaced by the run's result when it
// ends; elsewhere only the result lines are printed.
type TermProgress struct {
	w    io.Writer
	live bool

	mu       sync.Mutex
	label    string // what is running now ("" = nothing)
	since    time.Time
	n, total int
	spin     int
	eta      time.Time // when the bench should end (zero: not known yet)
	saidETA  time.Time // the ETA the last printed line said
	stop     chan struct{}
	stopped  chan struct{}
}

// NewProgress returns a progress printer writing to w; live selects the
// redrawn line (w should then be a terminal).
func NewProgress(w io.Writer, live bool) *TermProgress {
	p := &TermProgress{w: w, live: live}
	if live {
		p.stop, p.stopped = make(chan struct{}), make(chan struct{})
		go p.tick()
	}
	return p
}

func (p *TermProgress) tick() {
	defer close(p.stopped)
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-p.stop:
			return
		case <-t.C:
			p.mu.Lock()
			p.spin++
			p.redraw()
			p.mu.Unlock()
		}
	}
}

// Close stops redrawing and clears the live line.
func (p *TermProgress) Close() {
	if !p.live {
		return
	}
	select {
	case <-p.stop:
		return
	default:
	}
	close(p.stop)
	<-p.stopped
	p.mu.Lock()
	p.label = ""
	p.clear()
	p.mu.Unlock()
}

var spinner = []string{"⠋", "⠙", "⠹", "⠸", "⠼", "⠴", "⠦", "⠧", "⠇", "⠏"}

const barWidth = 20

// clear erases the live line (mu held).
func (p *TermProgress) clear() {
	if p.live {
		fmt.Fprint(p.w, "\r\x1b[K")
	}
}

// redraw draws the live line (mu held).
func (p *TermProgress) redraw() {
	if !p.live || p.label == "" {
		return
	}
	var b strings.Builder
	b.WriteString("\r\x1b[K")
	if p.total > 0 {
		filled := barWidth * (p.n - 1) / p.total
		fmt.Fprintf(&b, "[%s%s] %*d/%d ", strings.Repeat("█", filled), strings.Repeat("░", barWidth-filled),
			digits(p.total), p.n, p.total)
	}
	fmt.Fprintf(&b, "%s %s %5.1fs", p.label, spinner[p.spin%len(spinner)], time.Since(p.since).Seconds())
	if !p.eta.IsZero() && p.total > 0 {
		fmt.Fprintf(&b, "  ETA %s (%s left)", p.eta.Format("15:04"), roundDur(max(time.Until(p.eta), 0)))
	}
	fmt.Fprint(p.w, b.String())
}

// line prints a permanent line above the live one.
func (p *TermProgress) line(s string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.clear()
	fmt.Fprintln(p.w, s)
	p.redraw()
}

func (p *TermProgress) Phase(msg string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.live {
		fmt.Fprintln(p.w, msg+" …")
		return
	}
	p.label, p.since, p.total = msg, time.Now(), 0
	p.redraw()
}

func (p *TermProgress) Skip(target, reason string) {
	p.line(fmt.Sprintf("skipping %s: %s", target, reason))
}

func (p *TermProgress) Warn(msg string) { p.line("warning: " + msg) }

func (p *TermProgress) Step(msg string) { p.line(msg) }

func (p *TermProgress) ETA(repeat, repeats int, took, left time.Duration) {
	end := time.Now().Add(left)
	p.line(fmt.Sprintf("repeat %d of %d done (%s so far); about %s left, ETA %s",
		repeat, repeats, roundDur(took), roundDur(left), end.Format("15:04")))
	p.mu.Lock()
	p.eta, p.saidETA = end, end
	p.mu.Unlock()
}

// Estimate prints a line when asked (how), and also, where no live line
// shows the ETA, when the ETA has moved by more than a fifth of the time
// left (and at least a minute) since the last line said it.
func (p *TermProgress) Estimate(left time.Duration, how string) {
	end := time.Now().Add(left)
	p.mu.Lock()
	moved := end.Sub(p.saidETA)
	if moved < 0 {
		moved = -moved
	}
	say := how != "" || (!p.live && !p.saidETA.IsZero() && moved > max(time.Minute, left/5))
	p.eta = end
	if say {
		p.saidETA = end
	}
	p.mu.Unlock()
	if say {
		if how == "" {
			how = "refreshed from the runs so far"
		}
		p.line(fmt.Sprintf("estimated time: about %s, ETA %s (%s)", roundDur(left), end.Format("15:04"), how))
	}
}

// roundDur rounds d for people: 1m05s, 12s, 0.4s.
func roundDur(d time.Duration) string {
	switch {
	case d >= time.Minute:
		d = d.Round(time.Second)
		return fmt.Sprintf("%dm%02ds", int(d.Minutes()), int(d.Seconds())%60)
	case d >= 10*time.Second:
		return d.Round(time.Second).String()
	}
	return fmt.Sprintf("%.1fs", d.Seconds())
}

func (p *TermProgress) Start(r Run, n, total int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.label = runLabel(r, n, total, !p.live)
	p.since, p.n, p.total = time.Now(), n, total
	p.redraw()
}

func (p *TermProgress) Done(r Run, n, total int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.clear()
	p.label = ""
	fmt.Fprintf(p.w, "%s  %s\n", runLabel(r, n, total, true), runOutcome(r))
}

// runLabel is "[ 3/36] r1 seqwrite    crypt-xts        " (the counter only
// where no bar shows it).
func runLabel(r Run, n, total int, counter bool) string {
	s := fmt.Sprintf("r%d %-13s %-17s", r.Repeat, r.Workload, r.Target)
	if counter {
		s = fmt.Sprintf("[%*d/%d] %s", digits(total), n, total, s)
	}
	return s
}

// runOutcome is the end of a run's line: its time and status.
func runOutcome(r Run) string {
	if r.Skipped {
		return "skipped: " + strings.TrimPrefix(r.Error, "skipped: ")
	}
	if !r.OK() {
		msg := r.Error
		if len(msg) > 160 {
			msg = msg[:160] + "…"
		}
		return "FAIL  " + msg
	}
	s := fmt.Sprintf("%8.2fs", r.WallS)
	if r.WallS > 0 && r.Bytes > 0 {
		s += fmt.Sprintf("  %8.1f MiB/s", float64(r.Bytes)/(1<<20)/r.WallS)
	}
	if !r.Verified {
		s += "  (not verified)"
	}
	if r.Note != "" {
		s += "  note: " + r.Note
	}
	return s
}

func digits(n int) int { return len(fmt.Sprint(n)) }
