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
// then-arm. Instructions whose work grows with an operand are charged in
// proportion to it, before they run (see docs/metering.md for the measured
// time per unit):
//
//	memory.fill, memory.copy, memory.init   1 + n>>BulkMemoryShift (n bytes; 1 up to BulkMemoryFreeBytes)
//	table.fill, table.copy, table.init      1 + n*TableElementCost (n elements)
//	memory.grow                             1 + n*MemoryGrowPageCost (n pages)
//	table.grow                              1 + n*TableGrowElementCost (n elements)
//
// A body that uses them gets an i32 local to hold the operand while the
// charge is made. Counts depend only on the module bytes
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

// The cost model of instructions whose work grows with an operand; see the
// package documentation and docs/metering.md.
const (
	// BulkMemoryShift: memory.fill, memory.copy and memory.init charge one
	// unit per 2^BulkMemoryShift bytes (8).
	BulkMemoryShift = 3
	// BulkMemoryFreeBytes: memory.fill, memory.copy and memory.init of at
	// most this many bytes are charged their one unit only. A loop of them
	// still charges its own instructions, about six units per 1 KiB moved,
	// so a refuel (and a deadline check) comes at least every few ms.
	BulkMemoryFreeBytes = 1024
	// TableElementCost is the charge per element of table.fill, table.copy
	// and table.init.
	TableElementCost = 1
	// MemoryGrowPageCost is the charge per 64 KiB page of memory.grow: about
	// the cost of the host faulting the page in when it is first touched.
	MemoryGrowPageCost = 4096
	// TableGrowElementCost is the charge per element of table.grow.
	TableGrowElementCost = 4
	// TailCallExtraCost is charged by return_call and
	// return_call_indirect on top of their one unit: replacing a frame costs
	// about four instructions.
	TailCallExtraCost = 3
)

// DepthExceeded is the value the rewrite stores in the fuel global before it
// calls refuel when a call would exceed Options.MaxCallDepth. A real fuel
// counter never holds it: charges are bounded far below 2^63.
const DepthExceeded = -1 << 63

// Names the rewrite adds to a module. They are private to the host: a guest
// that imports ImportModule itself is refused before instrumentation.
const (
	ImportModule = "wasmreconcile_fuel"
	ImportRefuel = "refuel"
	ExportFuel   = "wasmreconcile_fuel"
)
