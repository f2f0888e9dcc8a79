package speed

import (
	"time"

	"golang.org/x/sys/unix"
)

// threadCPUTime returns the CPU time consumed so far by the calling OS
// thread. The caller must hold runtime.LockOSThread for two readings to be
// comparable.
func threadCPUTime() (time.Duration, bool) {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts); err != nil {
		return 0, false
	}
	return time.Duration(ts.Nano()), true
}
