# make soak [SOAK=10m] [SOAKFLAGS=-soak.profile=DIR]
SOAK ?= 1h
.PHONY: soak
soak:
	go test -run 'TestDifferential|TestSoak' -timeout 2h -v ./fs -args -soak=$(SOAK) $(SOAKFLAGS)

# Man pages (section 1), one per command, generated from the commands'
# help: man/man1/twincrypt.1, twincrypt-mount.1, ... ('man -l' to read,
# or install under /usr/local/share/man/man1).
.PHONY: man
man:
	go run ./cmd/twincrypt gen-man man/man1

# Crash-state exploration (integration/crashsim, docs/crash-model.md): the
# states a power cut can leave LOWER in while real workloads run (atomic
# replace, append-only log, SQLite WAL and rollback, git commit, untar and
# sync), on aes-xts, aes-cbc and plaintext names, each checked against
# cipher/FORMAT.md §7. Needs root, sqlite3, git and tar. The last line is
# "crash states: N explored, M violations". crash-states takes a few
# minutes (CI, scripts/test.sh); crash-states-long is the nightly setting.
.PHONY: crash-states crash-states-long
crash-states:
	go run ./integration/crashsim/cmd/crashstates -size short

crash-states-long:
	go run ./integration/crashsim/cmd/crashstates -size long
