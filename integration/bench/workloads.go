package bench

import "errors"

// The workloads are the source articles' jobs, each scaled by Env.Size
// (tiny: seconds in all, for tests; small: the default run; large: the
// articles' sizes). Every one of them
//
//   - runs real programs where they are installed (cp, gzip, tar, ls,
//     find/xargs/md5sum, rm, python3's sqlite3, lame; bonnie++ and fio
//     when asked) and a faithful Go implementation otherwise, saying
//     which in Result.Note;
//   - verifies what it wrote, reading it back through the filesystem
//     (the file's cached pages dropped first, so an encrypted mount
//     decrypts instead of returning the page cache), and returns an error
//     naming the file and offset that differ: a benchmark that silently
//     corrupts is worse than none;
//   - leaves its directory empty, except when it fails (the evidence
//     stays);
//   - counts in Result.Bytes the bytes its measured part read from or
//     wrote to the target (inputs read from Env.Cache are outside every
//     target and not counted).
//
// Workloads keep state between Prepare and Run (the inputs' digests);
// Run reloads it from Env.Cache when Prepare ran on another value. They
// are not safe for concurrent use.
//
// Default order, what each does, its sizes (tiny / small / default /
// large) and its Metrics besides Wall, Bytes and Ops:
//
//	seqwrite       one file in 1 MiB writes, fsync; 16/128/512/1024 MiB; MiBps
//	seqread        the same read back cold; 16/128/512/1024 MiB; MiBps
//	smallwrite4k   one file in 4 KiB write calls, fsync; 4/8/64/256 MiB; MiBps
//	smallwrite512  the same in 512-byte calls (dd bs=512); MiBps
//	copytree       cp -r of 364 files of 16 KiB/256 KiB/1 MiB/3.5 MiB; MiBps
//	gzip           gzip -c of a tar of 8/32/256/745 MiB; MiBps, ratio
//	srctree        tar xf, ls -lR, md5 of every file, rm -rf of Go's
//	               src/net, src/{net,crypto}, src, src; untar_s lsR_s md5_s rm_s
//	bonnie         bonnie++ -f: 16/32/256/3000 MiB block write and rewrite,
//	               create/stat/delete of 1k/4k/16k/16k files; write_MiBps
//	               rewrite_MiBps create_per_s stat_per_s delete_per_s
//	randrw         random 4 KiB reads/writes 70/30 at queue depth 1 on
//	               32/128/512/1024 MiB for 1/3/10/30 s; iops read_iops
//	               write_iops read_p50_us read_p99_us write_p50_us write_p99_us
//	sqlite         2k/20k/100k/1M inserts, 100 a transaction, WAL (python3);
//	               inserts_per_s commits_per_s
//	lame           lame -h of a WAV of 5/30/180/470 s; MiBps
//	git            git clone (pack protocol), status, commit of every
//	               tenth file, checkout, gc of srctree's files; clone_s
//	               status_s commit_s checkout_s gc_s
//	build          make -j of a generated C project of 24/96/384/1536
//	               units: full build, nothing to do, rebuild after a
//	               header changed; build_s noop_s rebuild_s
//
// Each type also says which figure its rows lead with (Headline).

// ErrSkipped is wrapped by the error of a workload that cannot run on this
// machine at all (a missing interpreter), as opposed to one that failed:
// the runner prints it as "skipped: …" (the error's text starts with
// "skipped").
var ErrSkipped = errors.New("skipped")

// Workloads returns every workload in the default order. The runner may
// set options on them before Prepare: (*RandRW).FIO for --fio and
// (*Bonnie).Program for --bonnie++.
func Workloads() []Workload {
	return []Workload{
		&SeqWrite{},
		&SeqRead{},
		&SmallWrite{BlockSize: 4096},
		&SmallWrite{BlockSize: 512},
		&CopyTree{},
		&Gzip{},
		&SrcTree{},
		&Bonnie{},
		&RandRW{},
		&SQLite{},
		&Lame{},
		&Git{},
		&Build{},
	}
}

// QuickWorkloads are the workloads of the first, quick bench: all but
// build and git, the two longest at size small (build alone takes as long
// as all the others together; git as long as the four cheapest), so that
// five repeats on four targets take about 5 minutes on 2 quiet cores.
func QuickWorkloads() []Workload {
	var out []Workload
	for _, w := range Workloads() {
		if n := w.Name(); n != "build" && n != "git" {
			out = append(out, w)
		}
	}
	return out
}

// WorkloadByName returns a fresh workload by its Name.
func WorkloadByName(name string) (Workload, bool) {
	for _, w := range Workloads() {
		if w.Name() == name {
			return w, true
		}
	}
	return nil, false
}

// The figure each workload's rows lead with (the runner's Headliner), as
// the articles and the peers table quote them: throughput for the
// sequential transfers, IOPS for random I/O, seconds for the applications.
func (*SeqWrite) Headline() string   { return "MiBps" }
func (*SeqRead) Headline() string    { return "MiBps" }
func (*SmallWrite) Headline() string { return "MiBps" }
func (*CopyTree) Headline() string   { return "wall_s" }
func (*Gzip) Headline() string       { return "wall_s" }
func (*SrcTree) Headline() string    { return "wall_s" }
func (*Bonnie) Headline() string     { return "wall_s" }
func (*RandRW) Headline() string     { return "iops" }
func (*SQLite) Headline() string     { return "wall_s" }
func (*Lame) Headline() string       { return "wall_s" }
func (*Git) Headline() string        { return "wall_s" }
func (*Build) Headline() string      { return "wall_s" }

var (
	_ Headliner = (*SeqWrite)(nil)
	_ Headliner = (*SeqRead)(nil)
	_ Headliner = (*SmallWrite)(nil)
	_ Headliner = (*CopyTree)(nil)
	_ Headliner = (*Gzip)(nil)
	_ Headliner = (*SrcTree)(nil)
	_ Headliner = (*Bonnie)(nil)
	_ Headliner = (*RandRW)(nil)
	_ Headliner = (*SQLite)(nil)
	_ Headliner = (*Lame)(nil)
	_ Headliner = (*Git)(nil)
	_ Headliner = (*Build)(nil)
)
