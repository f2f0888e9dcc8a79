package fs

import (
	"sync"
	"time"

	"github.com/rs/zerolog"
)

// Defaults of warnLimiter for names that cannot be shown: anyone who can
// write LOWER can plant thousands of them, and every listing meets them
// all again (issue #39, finding 8: 5,000 junk names made 1.37 MB of log
// for three ls).
const (
	nameWarnWindow = time.Minute
	nameWarnPerDir = 10
	nameWarnTotal  = 50
	// nameWarnKeys bounds the directories remembered in one window: past
	// it, every directory counts as already warned about.
	nameWarnKeys = 4096
)

// warnLimiter rate-limits one kind of warning: in each window, the first
// perKey warnings per key (a lower directory) and the first total in all
// are logged; the rest are counted, and the count is logged in one line
// when the window ends (or the mount does), so that the log says how many
// it did not show.
type warnLimiter struct {
	log    zerolog.Logger
	what   string // what was suppressed, for the summary line
	window time.Duration
	perKey int
	total  int

	mu         sync.Mutex
	start      time.Time
	keys       map[string]keyWarnings
	logged     int
	suppressed int
	dirs       int // keys with suppressed warnings
	timer      *time.Timer
}

// keyWarnings counts one key's warnings in the current window.
type keyWarnings struct{ logged, suppressed int }

func newWarnLimiter(log zerolog.Logger, what string) *warnLimiter {
	return &warnLimiter{log: log, what: what, window: nameWarnWindow, perKey: nameWarnPerDir, total: nameWarnTotal,
		keys: map[string]keyWarnings{}}
}

// allow reports whether a warning about key may be logged now; if not, it
// is counted for the summary.
func (l *warnLimiter) allow(key string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := time.Now()
	if l.start.IsZero() || now.Sub(l.start) >= l.window {
		l.flushLocked()
		l.start = now
	}
	c, known := l.keys[key]
	if !known && len(l.keys) >= nameWarnKeys {
		// Not remembered: counted as a directory of its own each time
		// (the summary's directory count is then an upper bound).
		l.dirs++
		l.suppressed++
		l.startTimer(now)
		return false
	}
	if l.logged < l.total && c.logged < l.perKey {
		c.logged++
		l.keys[key] = c
		l.logged++
		return true
	}
	if c.suppressed == 0 {
		l.dirs++
	}
	c.suppressed++
	l.keys[key] = c
	l.suppressed++
	l.startTimer(now)
	return false
}

// startTimer makes sure the summary is logged when the window ends, even
// if no warning comes after it.
func (l *warnLimiter) startTimer(now time.Time) {
	if l.timer != nil {
		return
	}
	var t *time.Timer
	// Called with l.mu held: t is set before the callback can look.
	t = time.AfterFunc(l.window-now.Sub(l.start), func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		if l.timer == t { // not a window already summed up
			l.flushLocked()
			l.start = time.Time{}
		}
	})
	l.timer = t
}

// flush logs the count of warnings suppressed so far and starts afresh
// (at the mount's end).
func (l *warnLimiter) flush() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.flushLocked()
	l.start = time.Time{}
}

func (l *warnLimiter) flushLocked() {
	if l.timer != nil {
		l.timer.Stop()
		l.timer = nil
	}
	if l.suppressed > 0 {
		l.log.Warn().Int("suppressed", l.suppressed).Int("directories", l.dirs).
			Msgf("%d more %s not logged (%d directories; at most %d per directory and %d in all are logged per %s)",
				l.suppressed, l.what, l.dirs, l.perKey, l.total, l.window)
	}
	l.logged, l.suppressed, l.dirs = 0, 0, 0
	clear(l.keys)
}
