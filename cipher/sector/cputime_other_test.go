//go:build !linux

package sector

import "time"

func threadCPUTime() (time.Duration, bool) { return 0, false }
