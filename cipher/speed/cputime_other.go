//go:build !linux

package speed

import "time"

// threadCPUTime is not implemented outside Linux; callers fall back to the
// wall clock.
func threadCPUTime() (time.Duration, bool) { return 0, false }
