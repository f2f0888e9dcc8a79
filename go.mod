module github.com/twincrypt/twincrypt

go 1.26.8

require (
	github.com/hanwen/go-fuse/v2 v2.12.1
	github.com/rfjakob/eme v1.2.0
	github.com/rs/zerolog v1.35.1
	github.com/spf13/cobra v1.10.2
	golang.org/x/crypto v0.59.0
	golang.org/x/sys v0.50.0
	golang.org/x/term v0.48.0
)

require (
	github.com/inconshreveable/mousetrap v1.1.0 // indirect
	github.com/mattn/go-colorable v0.1.14 // indirect
	github.com/mattn/go-isatty v0.0.20 // indirect
	github.com/spf13/pflag v1.0.9 // indirect
)
