;; count.wat: functions whose fuel is known by hand, for meter tests.
;; Build: wat2wasm count.wat -o count.wasm   (wabt 1.0.32, Debian package "wabt")
(module
  ;; 3 instructions; `end` is free.
  (func (export "three") (result i32)
    i32.const 1
    i32.const 2
    i32.add)
  ;; entry region: nothing but `loop` (free), charged the minimum of 1;
  ;; loop region: local.get, i32.const, i32.sub, local.tee, br_if = 5 per iteration.
  ;; Fuel for n >= 1 iterations: 1 + 5n.
  (func (export "loop") (param $n i32)
    (loop $l
      local.get $n
      i32.const 1
      i32.sub
      local.tee $n
      br_if $l))
  ;; never returns: 1 unit per iteration
  (func (export "spin")
    (loop $l (br $l)))
)
