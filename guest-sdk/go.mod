module github.com/wasmreconcile/wasmreconcile/guest-sdk

go 1.26
