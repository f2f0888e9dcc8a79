.PHONY: soak
soak:
	go test -run 'TestDifferential|TestSoak' -timeout 2h -v ./fs -args -soak=1h
