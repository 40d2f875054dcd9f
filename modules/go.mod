module github.com/wasmreconcile/wasmreconcile/modules

go 1.26

require (
	github.com/tetratelabs/wazero v1.12.0
	github.com/wasmreconcile/wasmreconcile/guest-sdk v0.0.0-00010101000000-000000000000
)

require golang.org/x/sys v0.44.0 // indirect

replace github.com/wasmreconcile/wasmreconcile/guest-sdk => ../guest-sdk
