;; echo.wat: an ABI v1 guest whose wr_reconcile returns its request unchanged.
;; Used to measure the host<->guest round trip without any guest logic.
;; Build: wat2wasm echo.wat -o echo.wasm   (wabt 1.0.32, Debian package "wabt")
(module
  (memory (export "memory") 2)
  (data (i32.const 0) "{\"name\":\"echo\",\"for\":{\"group\":\"test.wasmreconcile.io\",\"version\":\"v1\",\"kind\":\"Gadget\"}}")
  (func (export "wr_abi_v1"))
  (func (export "_initialize"))
  ;; one fixed buffer at 4096: requests fit in the remaining 124 KiB
  (func (export "wr_alloc") (param $size i32) (result i32)
    (i32.const 4096))
  (func (export "wr_manifest") (result i64)
    (i64.const 86))  ;; manifest at 0, packed as 0<<32 | len
  (func (export "wr_reconcile") (param $ptr i32) (param $len i32) (result i64)
    (i64.or
      (i64.shl (i64.extend_i32_u (local.get $ptr)) (i64.const 32))
      (i64.extend_i32_u (local.get $len))))
)
