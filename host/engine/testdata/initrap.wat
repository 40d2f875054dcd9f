;; initrap.wat: a hand-written ABI v1 guest for engine tests; see README.md.
;; Build: wat2wasm initrap.wat -o initrap.wasm   (wabt 1.0.32, Debian package "wabt")
(module
  (memory (export "memory") 1)
  (global $heap (mut i32) (i32.const 4096))
  (data (i32.const 0) "{\"name\":\"initrap\",\"for\":{\"group\":\"test.wasmreconcile.io\",\"version\":\"v1\",\"kind\":\"Gadget\"}}")
  (data (i32.const 1024) "{\"status\":{\"summary\":\"ok\"}}")
  (func (export "wr_abi_v1"))
  (func (export "_initialize")
    unreachable)
  (func (export "wr_alloc") (param $size i32) (result i32)
    (local $p i32)
    (local.set $p (global.get $heap))
    (global.set $heap (i32.add (global.get $heap) (local.get $size)))
    (local.get $p))
  (func (export "wr_manifest") (result i64)
    (i64.const 89))  ;; manifest at 0, packed as 0<<32 | len
  (func (export "wr_reconcile") (param $ptr i32) (param $len i32) (result i64)
    nop
    (i64.const 4398046511131))  ;; response at 1024, packed as 1024<<32 | 27
)
