;; hog.wat: an ABI v1 guest of Gadgets (test.wasmreconcile.io/v1) whose
;; manifest asks for 4 GiB of memory (memoryPages 65536). Each reconcile
;; grows its memory to its cap, writes every byte of it, then spins until a
;; limit stops the call: for as long as the call runs, its instance holds
;; its whole cap in the operator's resident memory. The memory budget
;; tests (host/operator/hardening_test.go) run three at once.
;; Build: wat2wasm hog.wat -o hog.wasm   (wabt 1.0.32, Debian package "wabt")
(module
  (memory (export "memory") 1)
  (data (i32.const 0) "{\"name\":\"hog\",\"for\":{\"group\":\"test.wasmreconcile.io\",\"version\":\"v1\",\"kind\":\"Gadget\"},\"limits\":{\"memoryPages\":65536}}")
  (func (export "wr_abi_v1"))
  (func (export "_initialize"))
  (func (export "wr_alloc") (param $size i32) (result i32)
    (i32.const 4096))
  (func (export "wr_manifest") (result i64)
    (i64.const 116))  ;; the manifest at 0, packed as 0<<32 | len
  (func (export "wr_reconcile") (param $ptr i32) (param $len i32) (result i64)
    (block $full
      (loop $grow
        (br_if $full (i32.eq (memory.grow (i32.const 16)) (i32.const -1)))
        (br $grow)))
    (memory.fill (i32.const 0) (i32.const 1) (i32.mul (memory.size) (i32.const 65536)))
    (loop $spin (br $spin))
    (unreachable))
)
