// Package instrument rewrites WebAssembly module bytes so that execution is
// metered: it adds a fuel counter and charges it at every function entry and
// every loop header, calling a host import when the counter goes negative.
// Package meter provides that import.
//
// # What the rewrite adds
//
//	(import "wasmreconcile_fuel" "refuel" (func))          ;; ImportModule, ImportRefuel
//	(global $fuel (mut i64) (i64.const 0))                 ;; exported as ExportFuel
//	(export "wasmreconcile_fuel" (global $fuel))
//
// and, at the start of every function body and right after every `loop`
// opcode, a charge of the region's static cost followed by a check:
//
//	global.get $fuel  i64.const <cost>  i64.sub  global.set $fuel
//	global.get $fuel  i64.const 0  i64.lt_s
//	if  call $refuel  end
//
// and, at every other charge point (see "Cost model"), the charge alone.
//
// # Cost model
//
// A function body is cut into regions at charge points: the function entry,
// every loop header, and every point a forward branch can land on (after the
// `end` of a block or if, and after `else`). A region's cost is the number of
// instructions from its charge point to the next one in program order,
// counting every opcode once except the structural markers `block`, `loop`,
// `else` and `end`, which compile to no code. Entries and loop headers charge
// and check the counter; merge points only charge (4 instructions), because
// execution cannot reach one again without passing an entry or a loop header.
//
// One unit of fuel is therefore about one executed wasm instruction that does
// work: exact for straight-line code, an over-estimate when a branch, a
// return or a trap leaves a region early, or when an if's condition skips its
// then-arm. Bulk memory instructions (memory.fill, memory.copy, table.* …)
// count as one regardless of length. Counts depend only on the module bytes
// and the path taken, so they are deterministic across instances, engines
// and processes.
//
// # Index spaces
//
// The added import is a function import, so every defined function's index
// grows by one. The rewrite remaps call, return_call, ref.func, the element
// section, exports, the start function, global initialisers and the name
// section. The added global is appended after all others and shifts nothing.
package instrument

// Names the rewrite adds to a module. They are private to the host: a guest
// that imports ImportModule itself is refused before instrumentation.
const (
	ImportModule = "wasmreconcile_fuel"
	ImportRefuel = "refuel"
	ExportFuel   = "wasmreconcile_fuel"
)
