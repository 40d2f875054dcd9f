;; ceiling.wat: an ABI v1 guest whose manifest asks for limits over the
;; default ceilings (fuel 9e9, 120 s, 32768 pages = 2 GiB), for the ceilings
;; tests. A 4-byte request makes wr_reconcile grow its memory a page at a time
;; until memory.grow fails, and return the page count reached (an i32, little
;; endian); any other request makes it spin until a limit stops it.
;; Build: wat2wasm ceiling.wat -o ceiling.wasm   (wabt 1.0.32, Debian package "wabt")
(module
  (memory (export "memory") 1)
  (data (i32.const 0) "{\"name\":\"ceiling\",\"for\":{\"group\":\"test.wasmreconcile.io\",\"version\":\"v1\",\"kind\":\"Gadget\"},\"limits\":{\"fuel\":9000000000,\"timeoutMillis\":120000,\"memoryPages\":32768}}")
  (func (export "wr_abi_v1"))
  (func (export "_initialize"))
  (func (export "wr_alloc") (param $size i32) (result i32)
    (i32.const 4096))
  (func (export "wr_manifest") (result i64)
    (i64.const 161))  ;; manifest at 0, packed as 0<<32 | len
  (func (export "wr_reconcile") (param $ptr i32) (param $len i32) (result i64)
    (if (i32.eq (local.get $len) (i32.const 4))
      (then
        (block $full
          (loop $grow
            (br_if $full (i32.eq (memory.grow (i32.const 1)) (i32.const -1)))
            (br $grow)))
        (i32.store (i32.const 1024) (memory.size))
        (return (i64.const 0x0000040000000004))))  ;; 1024<<32 | 4
    (loop $spin (br $spin))
    (unreachable))
)
