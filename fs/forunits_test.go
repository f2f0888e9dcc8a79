package fs

import (
	"sync"
	"testing"
)

// TestForUnits: every extent of a run is handled exactly once, however
// the run is split across goroutines.
func TestForUnits(t *testing.T) {
	for _, r := range [][2]int64{{0, 0}, {5, 5}, {0, 15}, {0, 16}, {3, 258}, {100, 1123}, {7, 40}} {
		var mu sync.Mutex
		seen := map[int64]int{}
		forUnits(r[0], r[1], func(e int64) {
			mu.Lock()
			seen[e]++
			mu.Unlock()
		})
		if int64(len(seen)) != r[1]-r[0]+1 {
			t.Errorf("run %v: %d extents handled", r, len(seen))
		}
		for e, n := range seen {
			if e < r[0] || e > r[1] || n != 1 {
				t.Errorf("run %v: extent %d handled %d times", r, e, n)
			}
		}
	}
}
