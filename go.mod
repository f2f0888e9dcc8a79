module github.com/twincrypt/twincrypt

go 1.26.8

require (
	github.com/hanwen/go-fuse/v2 v2.12.1
	github.com/rs/zerolog v1.35.1
)

require (
	github.com/mattn/go-colorable v0.1.14 // indirect
	github.com/mattn/go-isatty v0.0.20 // indirect
	golang.org/x/sys v0.50.0 // indirect
)
