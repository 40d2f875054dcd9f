//go:build ignore

// gen writes the adversarial guests: one .wat per case, built to .wasm with
// wat2wasm (wabt 1.0.32, Debian package "wabt"), and cases.json, the
// expectations host/engine's TestAdversarial reads. Run it from this
// directory after editing a case:
//
//	go run gen.go
//
// Every guest is a complete ABI v1 module whose wr_reconcile (or, for the
// load cases, whose shape) tries one way around a limit.
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"sort"
	"strings"
)

// Case is one guest.
type Case struct {
	Name     string `json:"name"`
	Category string `json:"category"`
	// Expect lists the outcome kinds (protocol.Kind names) that are correct.
	Expect []string `json:"expect"`
	// Load is true when the module must be refused at load (InvalidModule);
	// Contains is then a substring of the error.
	Load     bool   `json:"load,omitempty"`
	Contains string `json:"contains,omitempty"`
	// MemoryPages overrides the memory cap of the call.
	MemoryPages uint32 `json:"memoryPages,omitempty"`

	imports string // module fields before the memory
	pages   int    // initial memory pages (default 1)
	fields  string // extra module fields
	body    string // wr_reconcile's body; must end by returning an i64
	raw     string // the whole module, for shape cases
}

const stopped = "DeadlineExceeded|FuelExhausted"

// growTouch grows memory 16 pages at a time and writes every byte of each
// new MiB, until the grow fails at the cap; then it traps.
const growTouch = `(local $p i32) (block $full (loop $l
			(br_if $full (i32.eq (memory.grow (i32.const 16)) (i32.const -1)))
			(local.set $p (i32.shl (i32.sub (memory.size) (i32.const 16)) (i32.const 16)))
			(memory.fill (local.get $p) (i32.const 1) (i32.const 1048576))
			(br $l))) unreachable`

func loop(body string) string {
	return "(loop $l " + body + " (br $l)) (i64.const 0)"
}

var cases = []Case{
	// Bulk memory and table instructions in a loop.
	{Name: "memory-fill-64mib", Category: "bulk", pages: 1024, body: loop(`(memory.fill (i32.const 0) (i32.const 7) (i32.const 67108864))`)},
	{Name: "memory-copy-32mib", Category: "bulk", pages: 1024, body: loop(`(memory.copy (i32.const 0) (i32.const 33554432) (i32.const 33554432))`)},
	{Name: "memory-init-16kib", Category: "bulk", pages: 16, fields: `(data $d "` + strings.Repeat(`\ff`, 16384) + `")`,
		body: loop(`(memory.init $d (i32.const 0) (i32.const 0) (i32.const 16384))`)},
	{Name: "memory-fill-oob-huge", Category: "bulk", body: loop(`(memory.fill (i32.const 0) (i32.const 0) (i32.const -1))`), Expect: []string{"FuelExhausted", "GuestTrapped"}},
	{Name: "table-fill-loop", Category: "bulk", fields: `(table $t 60000 funcref) (elem declare func $f) (func $f)`,
		body: loop(`(table.fill $t (i32.const 0) (ref.func $f) (i32.const 60000))`)},
	{Name: "table-copy-loop", Category: "bulk", fields: `(table $t 60000 funcref)`,
		body: loop(`(table.copy $t $t (i32.const 0) (i32.const 30000) (i32.const 30000))`)},
	{Name: "table-init-loop", Category: "bulk", fields: `(table $t 1000 funcref) (elem $e funcref ` + strings.Repeat(`(ref.func $f) `, 1000) + `) (func $f)`,
		body: loop(`(table.init $t $e (i32.const 0) (i32.const 0) (i32.const 1000))`)},
	{Name: "memory-grow-fail-loop", Category: "bulk", body: loop(`(drop (memory.grow (i32.const 65536)))`)},
	{Name: "memory-grow-zero-loop", Category: "bulk", body: loop(`(drop (memory.grow (i32.const 0)))`)},
	{Name: "table-grow-fail-loop", Category: "bulk", fields: `(table $t 0 funcref)`, body: loop(`(drop (table.grow $t (ref.null func) (i32.const 67108864)))`)},
	{Name: "memory-copy-overlap-back", Category: "bulk", pages: 1024, body: loop(`(memory.copy (i32.const 1) (i32.const 0) (i32.const 67108863))`)},
	{Name: "memory-fill-zero-len", Category: "bulk", body: loop(`(memory.fill (i32.const 0) (i32.const 0) (i32.const 0))`)},
	{Name: "table-grow-fill-loop", Category: "bulk", fields: `(table $t 0 funcref) (elem declare func $f) (func $f)`,
		body: `(drop (table.grow $t (ref.null func) (i32.const 90000))) ` + loop(`(table.fill $t (i32.const 0) (ref.func $f) (table.size $t))`)},
	{Name: "data-drop-loop", Category: "bulk", fields: `(data $d "x")`, body: loop(`(data.drop $d)`)},

	// Table bombs.
	{Name: "table-grow-2p26", Category: "table", fields: `(table $t 0 funcref)`,
		body: `(if (i32.eq (table.grow $t (ref.null func) (i32.const 67108864)) (i32.const -1)) (then unreachable)) (i64.const 0)`, Expect: []string{"GuestTrapped"}},
	{Name: "table-grow-until-fail", Category: "table", fields: `(table $t 0 funcref)`,
		body: `(block $full (loop $l (br_if $full (i32.eq (table.grow $t (ref.null func) (i32.const 4096)) (i32.const -1))) (br $l))) unreachable`, Expect: []string{"GuestTrapped"}},
	{Name: "three-tables-1e8", Category: "table", fields: `(table 100000000 funcref) (table 100000000 funcref) (table 100000000 externref)`,
		body: `(i64.const 0)`, Load: true, Contains: "over the cap"},
	{Name: "table-min-over-cap", Category: "table", fields: `(table 100001 funcref)`, body: `(i64.const 0)`, Load: true, Contains: "over the cap"},
	{Name: "many-tables-grow", Category: "table", fields: strings.Repeat(`(table 0 funcref) `, 100),
		body: `(block $full (loop $l (br_if $full (i32.eq (table.grow 99 (ref.null func) (i32.const 1000)) (i32.const -1))) (br $l))) unreachable`, Expect: []string{"GuestTrapped"}},

	// Host functions and WASI in a loop.
	{Name: "log-4kib-loop", Category: "host", imports: `(import "wasmreconcile" "log" (func $log (param i32 i32 i32)))`,
		body: loop(`(call $log (i32.const 0) (i32.const 0) (i32.const 4096))`)},
	{Name: "log-1mib-loop", Category: "host", pages: 32, imports: `(import "wasmreconcile" "log" (func $log (param i32 i32 i32)))`,
		body: loop(`(call $log (i32.const 3) (i32.const 0) (i32.const 1048576))`)},
	{Name: "log-bad-pointer-loop", Category: "host", imports: `(import "wasmreconcile" "log" (func $log (param i32 i32 i32)))`,
		body: loop(`(call $log (i32.const 1) (i32.const -16) (i32.const 4000))`)},
	{Name: "cache-read-loop", Category: "host", pages: 16, imports: `(import "wasmreconcile" "cache_read" (func $read (param i32 i32 i32 i32) (result i64)))`,
		fields: `(data (i32.const 2048) "{\"op\":\"list\",\"apiVersion\":\"v1\",\"kind\":\"ConfigMap\",\"namespace\":\"default\"}")`,
		body:   loop(`(drop (call $read (i32.const 2048) (i32.const 72) (i32.const 65536) (i32.const 917504)))`)},
	{Name: "cache-read-bad-request-loop", Category: "host", imports: `(import "wasmreconcile" "cache_read" (func $read (param i32 i32 i32 i32) (result i64)))`,
		fields: `(data (i32.const 2048) "{\"op\":\"list\",\"apiVersion\":\"v1\",\"kind\":\"ConfigMap\",\"namespace\":\"default\"}")`,
		body:   loop(`(drop (call $read (i32.const 2048) (i32.const 70) (i32.const 8192) (i32.const 32768)))`)},
	{Name: "cache-read-forbidden-loop", Category: "host", imports: `(import "wasmreconcile" "cache_read" (func $read (param i32 i32 i32 i32) (result i64)))`,
		fields: `(data (i32.const 2048) "{\"op\":\"list\",\"apiVersion\":\"v1\",\"kind\":\"Secret\",\"namespace\":\"default\"}")`,
		body:   loop(`(drop (call $read (i32.const 2048) (i32.const 69) (i32.const 8192) (i32.const 32768)))`)},
	{Name: "random-get-64kib-loop", Category: "wasi", pages: 2, imports: `(import "wasi_snapshot_preview1" "random_get" (func $rand (param i32 i32) (result i32)))`,
		body: loop(`(drop (call $rand (i32.const 0) (i32.const 65536)))`)},
	{Name: "random-get-16mib-loop", Category: "wasi", pages: 512, imports: `(import "wasi_snapshot_preview1" "random_get" (func $rand (param i32 i32) (result i32)))`,
		body: loop(`(drop (call $rand (i32.const 0) (i32.const 16777216)))`)},
	{Name: "fd-write-stderr-loop", Category: "wasi", pages: 2, imports: `(import "wasi_snapshot_preview1" "fd_write" (func $w (param i32 i32 i32 i32) (result i32)))`,
		fields: `(data (i32.const 65536) "\00\00\00\00\00\00\01\00")`, // iovec {0, 65536}
		body:   loop(`(drop (call $w (i32.const 2) (i32.const 65536) (i32.const 1) (i32.const 65544)))`)},
	{Name: "fd-write-stdout-loop", Category: "wasi", pages: 2, imports: `(import "wasi_snapshot_preview1" "fd_write" (func $w (param i32 i32 i32 i32) (result i32)))`,
		fields: `(data (i32.const 65536) "\00\00\00\00\00\00\01\00")`,
		body:   loop(`(drop (call $w (i32.const 1) (i32.const 65536) (i32.const 1) (i32.const 65544)))`)},
	{Name: "fd-write-many-iovecs", Category: "wasi", pages: 16, imports: `(import "wasi_snapshot_preview1" "fd_write" (func $w (param i32 i32 i32 i32) (result i32)))`,
		body: loop(`(drop (call $w (i32.const 2) (i32.const 65536) (i32.const 100000) (i32.const 1000000)))`)},
	{Name: "fd-read-stdin-loop", Category: "wasi", imports: `(import "wasi_snapshot_preview1" "fd_read" (func $r (param i32 i32 i32 i32) (result i32)))`,
		fields: `(data (i32.const 1024) "\00\00\00\00\00\10\00\00")`,
		body:   loop(`(drop (call $r (i32.const 0) (i32.const 1024) (i32.const 1) (i32.const 1032)))`)},
	{Name: "poll-oneoff-loop", Category: "wasi", imports: `(import "wasi_snapshot_preview1" "poll_oneoff" (func $p (param i32 i32 i32 i32) (result i32)))`,
		// one clock subscription: userdata 0, tag 0 (clock), id 0 (realtime), timeout 1 s relative
		fields: `(data (i32.const 1024) "\00\00\00\00\00\00\00\00\00\00\00\00\00\00\00\00\00\00\00\00\00\00\00\00\00\ca\9a\3b\00\00\00\00\00\00\00\00\00\00\00\00\00\00\00\00\00\00\00\00")`,
		body:   loop(`(drop (call $p (i32.const 1024) (i32.const 2048) (i32.const 1) (i32.const 4096)))`)},
	{Name: "poll-oneoff-stdin-loop", Category: "wasi", imports: `(import "wasi_snapshot_preview1" "poll_oneoff" (func $p (param i32 i32 i32 i32) (result i32)))`,
		// two subscriptions: a 1 s clock, and fd_read on stdin (tag 1, fd 0)
		fields: `(data (i32.const 1024) "\00\00\00\00\00\00\00\00\00\00\00\00\00\00\00\00\00\00\00\00\00\00\00\00\00\ca\9a\3b\00\00\00\00\00\00\00\00\00\00\00\00\00\00\00\00\00\00\00\00\01\00\00\00\00\00\00\00\01\00\00\00\00\00\00\00\00\00\00\00\00\00\00\00\00\00\00\00\00\00\00\00\00\00\00\00\00\00\00\00\00\00\00\00\00\00\00\00\00\00")`,
		body:   loop(`(drop (call $p (i32.const 1024) (i32.const 2048) (i32.const 2) (i32.const 4096)))`)},
	{Name: "sock-accept-loop", Category: "wasi", imports: `(import "wasi_snapshot_preview1" "sock_accept" (func $a (param i32 i32 i32) (result i32)))`,
		body: loop(`(drop (call $a (i32.const 3) (i32.const 0) (i32.const 0)))`)},
	{Name: "fd-prestat-scan-loop", Category: "wasi", imports: `(import "wasi_snapshot_preview1" "fd_prestat_get" (func $ps (param i32 i32) (result i32)))`,
		body: `(local $fd i32) ` + loop(`(drop (call $ps (local.get $fd) (i32.const 0))) (local.set $fd (i32.add (local.get $fd) (i32.const 1)))`)},
	{Name: "args-get-loop", Category: "wasi", imports: `(import "wasi_snapshot_preview1" "args_get" (func $ag (param i32 i32) (result i32)))`,
		body: loop(`(drop (call $ag (i32.const 0) (i32.const 512)))`)},
	{Name: "clock-time-get-loop", Category: "wasi", imports: `(import "wasi_snapshot_preview1" "clock_time_get" (func $c (param i32 i64 i32) (result i32)))`,
		body: loop(`(drop (call $c (i32.const 1) (i64.const 0) (i32.const 0)))`)},
	{Name: "sched-yield-loop", Category: "wasi", imports: `(import "wasi_snapshot_preview1" "sched_yield" (func $y (result i32)))`,
		body: loop(`(drop (call $y))`)},
	{Name: "environ-sizes-loop", Category: "wasi", imports: `(import "wasi_snapshot_preview1" "environ_sizes_get" (func $e (param i32 i32) (result i32)))`,
		body: loop(`(drop (call $e (i32.const 0) (i32.const 4)))`)},
	{Name: "path-open-loop", Category: "wasi", imports: `(import "wasi_snapshot_preview1" "path_open" (func $o (param i32 i32 i32 i32 i32 i64 i64 i32 i32) (result i32)))`,
		fields: `(data (i32.const 1024) "/etc/passwd")`,
		body:   loop(`(drop (call $o (i32.const 3) (i32.const 0) (i32.const 1024) (i32.const 11) (i32.const 0) (i64.const -1) (i64.const -1) (i32.const 0) (i32.const 2048)))`)},
	{Name: "proc-exit", Category: "wasi", imports: `(import "wasi_snapshot_preview1" "proc_exit" (func $x (param i32)))`,
		body: `(call $x (i32.const 3)) (i64.const 0)`, Expect: []string{"GuestTrapped"}},

	// Memory.
	{Name: "grow-touch-until-fail", Category: "memory",
		body: growTouch, Expect: []string{"MemoryLimit", "DeadlineExceeded"}},
	{Name: "grow-touch-16mib-cap", Category: "memory", MemoryPages: 256,
		body: growTouch, Expect: []string{"MemoryLimit", "DeadlineExceeded"}},
	{Name: "grow-touch-1gib-cap", Category: "memory", MemoryPages: 16384,
		body: growTouch, Expect: []string{"MemoryLimit", "DeadlineExceeded"}},
	{Name: "grow-all-at-once", Category: "memory",
		body: `(if (i32.eq (memory.grow (i32.const 65535)) (i32.const -1)) (then unreachable)) (i64.const 0)`, Expect: []string{"MemoryLimit", "GuestTrapped"}},
	{Name: "grow-cap-then-fill", Category: "memory",
		body: `(drop (memory.grow (i32.sub (i32.const 2048) (memory.size)))) ` + loop(`(memory.fill (i32.const 0) (i32.const 9) (i32.shl (memory.size) (i32.const 16)))`)},
	{Name: "min-memory-over-cap", Category: "memory", pages: 4096, body: `(i64.const 0)`, Load: true, Contains: "over the limit"},

	// Compute, for comparison.
	{Name: "spin", Category: "compute", body: loop(``)},
	{Name: "recurse", Category: "compute", fields: `(func $r (param i32) (result i32) (i32.add (call $r (local.get 0)) (i32.const 1)))`,
		body: `(drop (call $r (i32.const 0))) (i64.const 0)`, Expect: []string{"StackOverflow", "DeadlineExceeded"}},
	{Name: "tail-call-spin", Category: "compute", fields: `(func $t (param i32) (return_call $t (i32.add (local.get 0) (i32.const 1))))`,
		body: `(call $t (i32.const 0)) (i64.const 0)`},
	{Name: "call-indirect-spin", Category: "compute", fields: `(type $v (func)) (table 1 funcref) (elem (i32.const 0) $g) (func $g (call_indirect (type $v) (i32.const 0)))`,
		body: `(call $g) (i64.const 0)`, Expect: []string{"StackOverflow", "DeadlineExceeded"}},

	// docs/abi.md clauses.
	{Name: "abi-packed-zero", Category: "abi", body: `(i64.const 0)`, Expect: []string{"ABIViolation"}},
	{Name: "abi-response-oob", Category: "abi", body: `(i64.const 0x7fff000000000010)`, Expect: []string{"ABIViolation"}},
	{Name: "abi-response-too-big", Category: "abi", pages: 128, body: `(i64.const 0x0000000000700000)`, Expect: []string{"ABIViolation"}},
	{Name: "abi-tail-calls-load", Category: "abi", fields: `(func $ok (result i64) (i64.const 4398046511105))`,
		body: `(return_call $ok)`, Expect: []string{"Success"}},
	{Name: "abi-marker-with-param", Category: "abi", Load: true, Contains: `"wr_abi_v1" has signature (i32) -> ()`, raw: "marker-param"},
	{Name: "abi-typed-ref-table", Category: "abi", Load: true, Contains: "typed function references", raw: "typed-ref"},
	{Name: "abi-imported-table", Category: "abi", Load: true, Contains: "imports table env.t", imports: `(import "env" "t" (table 1 funcref))`, body: `(i64.const 0)`},
	{Name: "abi-imported-global", Category: "abi", Load: true, Contains: "imports global env.g", imports: `(import "env" "g" (global i32))`, body: `(i64.const 0)`},
	{Name: "abi-imported-memory", Category: "abi", Load: true, Contains: "imports memory env.m", raw: "import-memory"},
	{Name: "abi-unknown-import", Category: "abi", Load: true, Contains: "env.f", imports: `(import "env" "f" (func))`, body: `(i64.const 0)`},
	{Name: "abi-unknown-wasi-import", Category: "abi", Load: true, Contains: "wasi_snapshot_preview1.no_such", imports: `(import "wasi_snapshot_preview1" "no_such" (func))`, body: `(i64.const 0)`},
	{Name: "abi-log-wrong-signature", Category: "abi", Load: true, Contains: "imports wasmreconcile.log with signature (i32) -> ()", imports: `(import "wasmreconcile" "log" (func (param i32)))`, body: `(i64.const 0)`},
	{Name: "abi-wasi-wrong-signature", Category: "abi", Load: true, Contains: "imports wasi_snapshot_preview1.random_get with signature (i64) -> ()", imports: `(import "wasi_snapshot_preview1" "random_get" (func (param i64)))`, body: `(i64.const 0)`},
	{Name: "abi-reserved-fuel-import", Category: "abi", Load: true, Contains: "wasmreconcile_fuel", imports: `(import "wasmreconcile_fuel" "refuel" (func))`, body: `(i64.const 0)`},
	{Name: "abi-reconcile-wrong-signature", Category: "abi", Load: true, Contains: `export "wr_reconcile" has signature`, raw: "reconcile-sig"},
	{Name: "abi-no-memory-export", Category: "abi", Load: true, Contains: `missing required export "memory"`, raw: "no-memory"},
	{Name: "abi-initialize-traps", Category: "abi", Load: true, Contains: "loading failed", raw: "init-trap"},
	{Name: "abi-memory64", Category: "abi", Load: true, Contains: "64-bit memory", raw: "memory64"},
	{Name: "abi-shared-memory", Category: "abi", Load: true, Contains: "shared memory", raw: "shared"},
	{Name: "abi-exceptions", Category: "abi", Load: true, Contains: "exception handling", raw: "exceptions"},
	{Name: "abi-version-v2", Category: "abi", Load: true, Contains: "declares ABI v2, but this host supports only ABI v1", raw: "v2"},
	{Name: "abi-manifest-not-json", Category: "abi", Load: true, Contains: "manifest is not valid JSON", raw: "bad-manifest"},
	{Name: "abi-manifest-packed-zero", Category: "abi", Load: true, Contains: "packed 0", raw: "manifest-zero"},
	{Name: "abi-manifest-too-big", Category: "abi", Load: true, Contains: "maxResponseBytes", raw: "manifest-big"},
	{Name: "abi-initialize-spins", Category: "abi", Load: true, Contains: "fuel exhausted", raw: "init-spin"},
}

const manifest = `{"name":"adv","for":{"group":"test.wasmreconcile.io","version":"v1","kind":"Gadget"}}`

// module assembles a standard ABI v1 guest around c's body.
func module(c Case) string {
	pages := c.pages
	if pages == 0 {
		pages = 1
	}
	esc := strings.ReplaceAll(manifest, `"`, `\"`)
	return fmt.Sprintf(`;; %s: adversarial guest, category %s; generated by gen.go, do not edit.
(module
  %s
  (memory (export "memory") %d)
  (global $heap (mut i32) (i32.const 16384))
  (data (i32.const 0) "%s")
  (data (i32.const 1024) "{}")
  %s
  (func (export "wr_abi_v1"))
  (func (export "_initialize"))
  (func (export "wr_alloc") (param $size i32) (result i32)
    (local $p i32)
    (local.set $p (global.get $heap))
    (global.set $heap (i32.add (global.get $heap) (local.get $size)))
    (local.get $p))
  (func (export "wr_manifest") (result i64) (i64.const %d))
  (func (export "wr_reconcile") (param $ptr i32) (param $len i32) (result i64)
    %s)
)
`, c.Name, c.Category, c.imports, pages, esc, c.fields, len(manifest), c.body)
}

// raw are the shape cases the standard module cannot express.
func raw(c Case) string {
	std := Case{Name: c.Name, Category: c.Category, body: `(i64.const 4398046511106)`}
	m := module(std)
	switch c.raw {
	case "marker-param":
		return strings.Replace(m, `(func (export "wr_abi_v1"))`, `(func (export "wr_abi_v1") (param i32))`, 1)
	case "typed-ref":
		// wat2wasm 1.0.32 cannot write a typed reference table: write a
		// funcref table and patch its type (patchTypedRef).
		return strings.Replace(m, `(global $heap`, `(type $ft (func)) (table 1 funcref) (global $heap`, 1)
	case "import-memory":
		m = strings.Replace(m, `(memory (export "memory") 1)`, `(import "env" "m" (memory 1)) (export "memory" (memory 0))`, 1)
		return m
	case "reconcile-sig":
		return strings.Replace(m, `(func (export "wr_reconcile") (param $ptr i32) (param $len i32) (result i64)`, `(func (export "wr_reconcile") (param $ptr i32) (result i64)`, 1)
	case "no-memory":
		return strings.Replace(m, `(memory (export "memory") 1)`, `(memory 1)`, 1)
	case "init-trap":
		return strings.Replace(m, `(func (export "_initialize"))`, `(func (export "_initialize") unreachable)`, 1)
	case "memory64":
		m = strings.Replace(m, `(memory (export "memory") 1)`, `(memory (export "memory") i64 1)`, 1)
		return strings.ReplaceAll(m, `(data (i32.const`, `(data (i64.const`)
	case "shared":
		return strings.Replace(m, `(memory (export "memory") 1)`, `(memory (export "memory") 1 2 shared)`, 1)
	case "exceptions":
		return strings.Replace(m, `(global $heap`, `(tag $e) (func $throws (throw $e)) (global $heap`, 1)
	case "v2":
		return strings.Replace(m, `(func (export "wr_abi_v1"))`, `(func (export "wr_abi_v2"))`, 1)
	case "bad-manifest":
		// the manifest is "{", the first byte of the document at 1024
		return strings.Replace(m, `(func (export "wr_manifest") (result i64) (i64.const `, `(func (export "wr_manifest") (result i64) (return (i64.const 4398046511105)) (i64.const `, 1)
	case "manifest-zero":
		return strings.Replace(m, `(func (export "wr_manifest") (result i64) (i64.const `, `(func (export "wr_manifest") (result i64) (return (i64.const 0)) (i64.const `, 1)
	case "manifest-big":
		return strings.Replace(strings.Replace(m, `(memory (export "memory") 1)`, `(memory (export "memory") 80)`, 1),
			`(func (export "wr_manifest") (result i64) (i64.const `, `(func (export "wr_manifest") (result i64) (return (i64.const 0x0000000000500000)) (i64.const `, 1)
	case "init-spin":
		return strings.Replace(m, `(func (export "_initialize"))`, `(func (export "_initialize") (loop $l (br $l)))`, 1)
	}
	panic("unknown raw case " + c.raw)
}

func main() {
	sort.SliceStable(cases, func(i, j int) bool { return cases[i].Category < cases[j].Category })
	for i := range cases {
		c := &cases[i]
		if c.Load {
			c.Expect = []string{"InvalidModule"}
		}
		if len(c.Expect) == 0 {
			c.Expect = strings.Split(stopped, "|")
		}
		text := module(*c)
		if c.raw != "" {
			text = raw(*c)
		}
		wat := c.Name + ".wat"
		if err := os.WriteFile(wat, []byte(text), 0o644); err != nil {
			panic(err)
		}
		args := []string{wat, "-o", c.Name + ".wasm", "--enable-tail-call", "--enable-memory64", "--enable-threads", "--enable-exceptions"}
		if out, err := exec.Command("wat2wasm", args...).CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "%s: %v\n%s", wat, err, out)
			os.Exit(1)
		}
		if c.raw == "typed-ref" {
			patchTypedRef(c.Name + ".wasm")
		}
	}
	b, _ := json.MarshalIndent(cases, "", "  ")
	if err := os.WriteFile("cases.json", append(b, '\n'), 0o644); err != nil {
		panic(err)
	}
	fmt.Printf("wrote %d guests\n", len(cases))
}

// patchTypedRef rewrites the module's one-table section from funcref to
// (ref null 0), a typed function reference to type 0.
func patchTypedRef(path string) {
	b, err := os.ReadFile(path)
	if err != nil {
		panic(err)
	}
	// The table section of a 1-page module: id 4, size 4, count 1, 0x70, flags 0, min 1.
	old := []byte{4, 4, 1, 0x70, 0, 1}
	i := strings.Index(string(b), string(old))
	if i < 0 {
		panic("table section not found")
	}
	patched := append(append(append([]byte{}, b[:i]...), 4, 5, 1, 0x63, 0x00, 0, 1), b[i+len(old):]...)
	if err := os.WriteFile(path, patched, 0o644); err != nil {
		panic(err)
	}
}
