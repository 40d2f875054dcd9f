module github.com/wasmreconcile/wasmreconcile

go 1.26.0

replace github.com/wasmreconcile/wasmreconcile/guest-sdk => ./guest-sdk

require (
	github.com/go-logr/logr v1.4.3
	github.com/tetratelabs/wazero v1.12.0
	github.com/wasmreconcile/wasmreconcile/guest-sdk v0.0.0-00010101000000-000000000000
)

require golang.org/x/sys v0.48.0 // indirect
