.PHONY: soak
soak:
	go test -run 'TestDifferential|TestSoak' -timeout 2h -v ./fs -args -soak=1h

# Man pages (section 1), one per command, generated from the commands'
# help: man/man1/twincrypt.1, twincrypt-mount.1, ... ('man -l' to read,
# or install under /usr/local/share/man/man1).
.PHONY: man
man:
	go run ./cmd/twincrypt gen-man man/man1
