package crashsim

import (
	"fmt"
	"hash/fnv"
	"math/rand"
	"sort"
)

// State is one crash state: the power failed after the first Crash
// operations of the log had been made; of those, the ones in Keep reached
// the disk.
type State struct {
	Crash int
	Keep  []bool // len Crash
	// MetaCut is how many of the metadata operations before Crash persisted.
	MetaCut int
	Desc    string
}

// Build is the tree of s: start plus the kept operations, in log order.
func (s State) Build(start *Tree, ops []Op) *Tree {
	t := start.Clone()
	for i := 0; i < s.Crash; i++ {
		if s.Keep[i] {
			t.Apply(ops[i])
		}
	}
	return t
}

// InFlight is every inode that an operation before the crash touched
// (created, wrote, renamed in or out of, as the directory of a name).
func (s State) InFlight(ops []Op) map[ID]bool {
	m := map[ID]bool{}
	for i := 0; i < s.Crash; i++ {
		o := ops[i]
		switch {
		case o.Kind == OpSync:
		case o.Kind == OpCreate || o.Kind == OpLink:
			m[o.Dir], m[o.Ino] = true, true
		case o.Kind == OpUnlink:
			m[o.Dir] = true
		case o.Kind == OpRename:
			m[o.Dir], m[o.Dir2] = true, true
		case o.Kind.IsBarrier():
		default:
			m[o.Ino] = true
		}
	}
	return m
}

// model holds what the generator precomputes about a log.
type model struct {
	ops []Op
	// metaBefore[i] is the number of metadata operations in ops[:i].
	metaBefore []int
	// metaAt[k] is the index of the k-th metadata operation.
	metaAt []int
	// forcedMeta[c] is how many metadata operations a crash after ops[:c]
	// keeps for certain: every one before a completed fsync, fsyncdir or
	// sync (ext4 commits its whole journal for any of them), for
	// fdatasync those up to the file's last size change.
	forcedMeta []int
	// dataBarrier[i], for a write, is the index of the first barrier after
	// it that makes it durable (fsync or fdatasync of its file, sync), or
	// len(ops).
	dataBarrier []int
}

func newModel(ops []Op) *model {
	m := &model{ops: ops, metaBefore: make([]int, len(ops)+1), forcedMeta: make([]int, len(ops)+1), dataBarrier: make([]int, len(ops))}
	lastSize := map[ID]int{} // index+1 of the last size change per inode
	for i, o := range ops {
		m.metaBefore[i+1] = m.metaBefore[i]
		m.forcedMeta[i+1] = m.forcedMeta[i]
		if o.Kind.IsMeta() {
			m.metaAt = append(m.metaAt, i)
			m.metaBefore[i+1]++
			if o.Kind == OpTruncate || o.Kind == OpSetSize {
				lastSize[o.Ino] = i + 1
			}
		}
		if o.Kind.IsBarrier() {
			f := m.metaBefore[i]
			if o.Kind == OpFsync && o.Datasync {
				f = m.metaBefore[lastSize[o.Ino]]
			}
			if f > m.forcedMeta[i+1] {
				m.forcedMeta[i+1] = f
			}
		}
	}
	next := map[ID]int{}
	nextSync := len(ops)
	for i := len(ops) - 1; i >= 0; i-- {
		o := ops[i]
		switch o.Kind {
		case OpSync:
			nextSync = i
		case OpFsync:
			next[o.Ino] = i
		case OpWrite:
			b := nextSync
			if n, ok := next[o.Ino]; ok && n < b {
				b = n
			}
			m.dataBarrier[i] = b
		}
	}
	return m
}

// GenOptions size the exploration.
type GenOptions struct {
	// Max is the number of states to return at most (sampled with Seed
	// when there are more).
	Max  int
	Seed int64
	// Subsets is how many random subsets of the unsynced pages to try per
	// metadata cut, besides all and none.
	Subsets int
}

// Generate returns the distinct crash states of ops under the model of
// docs/crash-model.md: for every crash point, every metadata cut between
// the forced one and all (up to four sampled in between), and for each the
// unsynced pages all kept, none kept, per file a prefix, and random
// subsets. States are deduplicated on what they keep and on the crash
// point's promises (promiseKey), then sampled down to opt.Max; distinct is
// how many there were before sampling.
func Generate(ops []Op, opt GenOptions, promiseKey func(crash int) string) (states []State, distinct int) {
	m := newModel(ops)
	rng := rand.New(rand.NewSource(opt.Seed))
	seen := map[uint64]bool{}
	add := func(s State) {
		h := fnv.New64a()
		fmt.Fprint(h, promiseKey(s.Crash), "|")
		for i, k := range s.Keep {
			if k {
				fmt.Fprint(h, i, ",")
			}
		}
		sum := h.Sum64()
		if seen[sum] {
			return
		}
		seen[sum] = true
		states = append(states, s)
	}
	for c := 0; c <= len(ops); c++ {
		// A crash just before a barrier is the interesting point; one
		// after a page of data only adds that page, so crash points in the
		// middle of a run of writes are sampled.
		if c > 0 && c < len(ops) && ops[c-1].Kind == OpWrite && ops[c].Kind == OpWrite && rng.Intn(4) != 0 {
			continue
		}
		lo, hi := m.forcedMeta[c], m.metaBefore[c]
		cuts := []int{hi}
		if lo != hi {
			cuts = append(cuts, lo)
		}
		if hi-lo <= 4 {
			for k := lo + 1; k < hi; k++ {
				cuts = append(cuts, k)
			}
		} else {
			for j := 0; j < 3; j++ {
				cuts = append(cuts, lo+1+rng.Intn(hi-lo-1))
			}
		}
		var free []int
		for i := 0; i < c; i++ {
			if ops[i].Kind == OpWrite && m.dataBarrier[i] >= c {
				free = append(free, i)
			}
		}
		for _, k := range cuts {
			base := make([]bool, c)
			for i := 0; i < c; i++ {
				o := ops[i]
				switch {
				case o.Kind.IsMeta():
					base[i] = m.metaBefore[i] < k
				case o.Kind == OpWrite:
					base[i] = true
				}
			}
			variants := [][]bool{}
			all := base
			variants = append(variants, all)
			if len(free) > 0 {
				none := append([]bool(nil), base...)
				for _, i := range free {
					none[i] = false
				}
				variants = append(variants, none)
				// Per file, a prefix of its unsynced pages (the order a
				// sequential writer's pages reach the disk).
				pre := append([]bool(nil), base...)
				cut := map[ID]int{}
				for _, i := range free {
					cut[ops[i].Ino]++
				}
				for id, n := range cut {
					cut[id] = rng.Intn(n + 1)
				}
				for _, i := range free {
					id := ops[i].Ino
					pre[i] = cut[id] > 0
					cut[id]--
				}
				variants = append(variants, pre)
				for j := 0; j < opt.Subsets; j++ {
					sub := append([]bool(nil), base...)
					for _, i := range free {
						sub[i] = rng.Intn(2) == 0
					}
					variants = append(variants, sub)
				}
			}
			for vi, keep := range variants {
				add(State{Crash: c, Keep: keep, MetaCut: k, Desc: fmt.Sprintf("crash after op %d, %d/%d metadata ops, pages %s", c, k, hi, [...]string{"all", "none", "prefix", "random"}[min(vi, 3)])})
			}
		}
	}
	distinct = len(states)
	if opt.Max > 0 && len(states) > opt.Max {
		rng.Shuffle(len(states), func(i, j int) { states[i], states[j] = states[j], states[i] })
		states = states[:opt.Max]
		sort.Slice(states, func(i, j int) bool { return states[i].Crash < states[j].Crash })
	}
	return states, distinct
}

// Pick builds the state "crash after ops[:crash], the first metaCut
// metadata operations persisted (at least those the model forces), every
// page kept except those drop selects and the model does not force": the
// regression tests name the state that showed a bug this way.
func Pick(ops []Op, crash, metaCut int, drop func(i int, o Op) bool) State {
	m := newModel(ops)
	metaCut = max(min(metaCut, m.metaBefore[crash]), m.forcedMeta[crash])
	keep := make([]bool, crash)
	for i := 0; i < crash; i++ {
		o := ops[i]
		switch {
		case o.Kind.IsMeta():
			keep[i] = m.metaBefore[i] < metaCut
		case o.Kind == OpWrite:
			keep[i] = m.dataBarrier[i] < crash || !drop(i, o)
		}
	}
	return State{Crash: crash, Keep: keep, MetaCut: metaCut, Desc: fmt.Sprintf("picked: crash after op %d, %d metadata ops", crash, metaCut)}
}
