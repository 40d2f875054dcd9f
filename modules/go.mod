module github.com/wasmreconcile/wasmreconcile/modules

go 1.26

require github.com/wasmreconcile/wasmreconcile/guest-sdk v0.0.0-00010101000000-000000000000

replace github.com/wasmreconcile/wasmreconcile/guest-sdk => ../guest-sdk
