package instrument

import "fmt"

// Opcodes the rewrite acts on.
const (
	opBlock              = 0x02
	opLoop               = 0x03
	opIf                 = 0x04
	opElse               = 0x05
	opEnd                = 0x0b
	opBr                 = 0x0c
	opBrIf               = 0x0d
	opBrTable            = 0x0e
	opReturn             = 0x0f
	opCall               = 0x10
	opCallIndirect       = 0x11
	opReturnCall         = 0x12
	opReturnCallIndirect = 0x13
	opLocalGet           = 0x20
	opLocalSet           = 0x21
	opLocalTee           = 0x22
	opRefFunc            = 0xd2
	opGlobalGet          = 0x23
	opGlobalSet          = 0x24
	opI64Const           = 0x42
	opI64Sub             = 0x7d
	opI64LtS             = 0x53
	opI64Mul             = 0x7e
	opI64ShrU            = 0x88
	opI64ExtendI32U      = 0xad
	opMemoryGrow         = 0x40
	opMisc               = 0xfc
	blockEmpty           = 0x40
)

// bulkCharge says how an instruction whose work grows with its length
// operand (an i32 on top of the stack) is charged: the operand is shifted
// right by shift, then multiplied by mul. grow is true for memory.grow and
// table.grow, which are charged after they run and only when they succeed,
// since a failed grow does no work whatever its operand. ok is false for
// every other instruction.
func bulkCharge(op byte, imm []byte) (shift, mul, free int64, grow, ok bool) {
	if op == opMemoryGrow {
		return 0, MemoryGrowPageCost, 0, true, true
	}
	if op != opMisc {
		return 0, 0, 0, false, false
	}
	sub, _ := newReader(imm).u32("0xFC sub-opcode")
	switch sub {
	case 8, 10, 11: // memory.init, memory.copy, memory.fill
		return BulkMemoryShift, 1, BulkMemoryFreeBytes, false, true
	case 12, 14, 17: // table.init, table.copy, table.fill
		return 0, TableElementCost, 0, false, true
	case 15: // table.grow
		return 0, TableGrowElementCost, 0, true, true
	}
	return 0, 0, 0, false, false
}

func (m *module) rewriteCode(p []byte) ([]byte, error) {
	r := newReader(p)
	n, err := r.u32("function body count")
	if err != nil {
		return nil, err
	}
	if int(n) != len(m.funcTypes) {
		return nil, fmt.Errorf("%d function bodies for %d declared functions", n, len(m.funcTypes))
	}
	out := appendU32(make([]byte, 0, len(p)+len(p)/8), n)
	var total uint64 // the functions' complexities (Options.MaxModuleComplexity)
	for i := uint32(0); i < n; i++ {
		size, err := r.u32("function body size")
		if err != nil {
			return nil, err
		}
		body, err := r.bytes(int(size), "function body")
		if err != nil {
			return nil, err
		}
		nb, shape, err := m.rewriteBody(body, m.typeParams[m.funcTypes[i]])
		if err != nil {
			return nil, fmt.Errorf("function %d (index %d): %w", i, m.numFuncImports+i, err)
		}
		cost := (shape.locals + 1) * (shape.blocks + 1) // both are bounded by the body's size: no overflow
		if m.maxFuncCost > 0 && cost > m.maxFuncCost {
			return nil, &ComplexityError{Function: int64(m.numFuncImports + i), Locals: shape.locals, Blocks: shape.blocks, Complexity: cost, Max: m.maxFuncCost}
		}
		if total += cost; m.maxModuleCost > 0 && total > m.maxModuleCost {
			return nil, &ComplexityError{Function: -1, Complexity: total, Max: m.maxModuleCost}
		}
		out = appendU32(out, uint32(len(nb)))
		out = append(out, nb...)
	}
	if !r.done() {
		return nil, fmt.Errorf("%d trailing bytes", len(p)-r.pos())
	}
	return out, nil
}

// edit is a change pass 2 makes at a byte offset of the body.
type edit struct {
	at    int    // offset in the body
	end   int    // for editRemap: end of the LEB index being replaced
	kind  byte   // what to insert
	cost  int64  // for charges; for editBulk, the multiplier
	shift int64  // for editBulk
	free  int64  // for editBulk: lengths up to it are not charged
	index uint32 // for editRemap
}

const (
	editEntry      = iota // charge from the global into the local, and check
	editLoop              // charge the local and check
	editCharge            // charge the local only (merge points)
	editFlush             // store the local into the global (before calls and exits)
	editReload            // load the local from the global (after calls)
	editRemap             // replace a function index
	editBulk              // charge the length operand on the stack and check
	editGrowSave          // save a grow's operand, leaving it on the stack
	editGrowCharge        // after a grow: charge the saved operand if it succeeded
	editDepthIn           // before a call: depth++
	editDepthOut          // after a call: depth--
)

// shape is what a function body's compile cost grows with
// (Options.MaxFunctionComplexity).
type shape struct {
	locals uint64 // parameters and declared locals
	blocks uint64 // blocks, loops and ifs
}

// rewriteBody inserts fuel charges into one function body and remaps the
// function indices it uses, and returns its shape. nparams is the
// function's parameter count.
//
// The body is cut into regions at charge points: the function entry, every
// loop header (right after `loop`), and every point a forward branch can
// land on (right after the `end` of a block or if, and right after `else`).
// Each region is charged its static instruction count when entered. Entries
// and loop headers also check the counter and call refuel when it is
// negative; merge points only subtract, because reaching one again requires
// passing a loop header or a function entry first.
//
// Within a function the counter lives in an added i64 local, which the
// engine keeps in a register; it is loaded from the fuel global at entry and
// after every call, and stored back before every call, return, tail call and
// branch out of the function. Pass 1 finds the edits, pass 2 applies them.
func (m *module) rewriteBody(body []byte, nparams uint32) (_ []byte, sh shape, _ error) {
	r := newReader(body)
	groups, err := r.u32("local declaration count")
	if err != nil {
		return nil, sh, err
	}
	nlocals := uint64(nparams)
	for i := uint32(0); i < groups; i++ {
		c, err := r.u32("local count")
		if err != nil {
			return nil, sh, err
		}
		nlocals += uint64(c)
		if _, err := r.byte("local type"); err != nil {
			return nil, sh, err
		}
	}
	if nlocals >= 50_000 {
		return nil, sh, fmt.Errorf("%d locals: too many to add the fuel local", nlocals)
	}
	sh.locals = nlocals
	fuelLocal := uint32(nlocals)
	lengthLocal := fuelLocal + 1 // i32s, added only when the body has bulk instructions
	resultLocal := fuelLocal + 2
	bulk := false
	codeStart := r.pos()

	// Pass 1: edits and region costs.
	edits := []edit{{at: codeStart, kind: editEntry}}
	region := 0        // index in edits of the current region's charge
	stack := []byte{0} // control frames by opening opcode; 0 is the function
	exits := func(label uint32) bool { return int(label) == len(stack)-1 }
	for len(stack) > 0 {
		if r.done() {
			return nil, sh, fmt.Errorf("function body has no final end")
		}
		start := r.pos()
		op, err := r.byte("opcode")
		if err != nil {
			return nil, sh, err
		}
		if op != opBlock && op != opLoop && op != opElse && op != opEnd {
			edits[region].cost++ // structural markers compile to no code and are free
		}
		if op == opReturnCall || op == opReturnCallIndirect {
			edits[region].cost += TailCallExtraCost // a frame replaced costs more than a branch
		}
		if err := skipInstruction(r, op); err != nil {
			return nil, sh, err
		}
		imm := body[start+1 : r.pos()]
		if err := m.checkIndices(op, imm); err != nil {
			return nil, sh, err
		}
		if shift, mul, free, grow, ok := bulkCharge(op, imm); ok {
			if grow {
				edits = append(edits, edit{at: start, kind: editGrowSave},
					edit{at: r.pos(), kind: editGrowCharge, shift: shift, cost: mul})
			} else {
				edits = append(edits, edit{at: start, kind: editBulk, shift: shift, cost: mul, free: free})
			}
			bulk = true
		}
		switch op {
		case opLocalGet, opLocalSet, opLocalTee:
			idx, _ := newReader(imm).u32("local index")
			if idx >= fuelLocal {
				return nil, sh, fmt.Errorf("unknown local %d (the function has %d)", idx, fuelLocal)
			}
		case opCall, opCallIndirect:
			edits = append(edits, edit{at: start, kind: editFlush})
			if m.maxCallDepth > 0 {
				edits = append(edits, edit{at: start, kind: editDepthIn})
			}
			if op == opCall {
				edits = m.appendRemap(edits, start, r.pos(), imm)
			}
			edits = append(edits, edit{at: r.pos(), kind: editReload})
			if m.maxCallDepth > 0 {
				edits = append(edits, edit{at: r.pos(), kind: editDepthOut})
			}
		case opReturnCall, opReturnCallIndirect, opReturn:
			edits = append(edits, edit{at: start, kind: editFlush})
			if op == opReturnCall {
				edits = m.appendRemap(edits, start, r.pos(), imm)
			}
		case opRefFunc:
			edits = m.appendRemap(edits, start, r.pos(), imm)
		case opBr, opBrIf:
			label, _ := newReader(imm).u32("label")
			if exits(label) {
				edits = append(edits, edit{at: start, kind: editFlush})
			}
		case opBrTable:
			ir := newReader(imm)
			n, _ := ir.u32("br_table count")
			for i := uint32(0); i <= n; i++ {
				if label, _ := ir.u32("label"); exits(label) {
					edits = append(edits, edit{at: start, kind: editFlush})
					break
				}
			}
		case opBlock, opIf:
			sh.blocks++
			stack = append(stack, op)
		case opLoop:
			sh.blocks++
			stack = append(stack, op)
			edits = append(edits, edit{at: r.pos(), kind: editLoop})
			region = len(edits) - 1
		case opElse:
			edits = append(edits, edit{at: r.pos(), kind: editCharge})
			region = len(edits) - 1
		case opEnd:
			closed := stack[len(stack)-1]
			stack = stack[:len(stack)-1]
			switch {
			case len(stack) == 0: // the function's final end
				edits = append(edits, edit{at: start, kind: editFlush})
			case closed == opBlock || closed == opIf:
				edits = append(edits, edit{at: r.pos(), kind: editCharge})
				region = len(edits) - 1
			}
		}
	}
	if !r.done() {
		return nil, sh, fmt.Errorf("%d bytes after the function's final end", len(body)-r.pos())
	}

	// Pass 2: the locals with the fuel local appended, then the code with
	// the edits applied in order.
	out := make([]byte, 0, len(body)+12*len(edits)+8)
	if bulk {
		out = appendU32(out, groups+2)
	} else {
		out = appendU32(out, groups+1)
	}
	out = append(out, body[newReader(body).skipU32():codeStart]...)
	out = append(out, 0x01, 0x7e) // one i64
	if bulk {
		out = append(out, 0x02, 0x7f) // two i32s
	}
	prev := codeStart
	for _, e := range edits {
		out = append(out, body[prev:e.at]...)
		prev = e.at
		switch e.kind {
		case editEntry:
			out = append(out, opGlobalGet)
			out = appendU32(out, m.fuelGlobalIndex)
			out = m.appendCheck(out, e.cost, fuelLocal)
			if m.maxCallDepth > 0 {
				out = m.appendDepthCheck(out)
			}
		case editDepthIn:
			out = m.appendDepthAdd(out, 0x6a) // i32.add
		case editDepthOut:
			out = m.appendDepthAdd(out, 0x6b) // i32.sub
		case editLoop:
			out = append(out, opLocalGet)
			out = appendU32(out, fuelLocal)
			out = m.appendCheck(out, e.cost, fuelLocal)
		case editCharge:
			if e.cost > 0 {
				out = append(out, opLocalGet)
				out = appendU32(out, fuelLocal)
				out = append(out, opI64Const)
				out = appendS64(out, e.cost)
				out = append(out, opI64Sub, opLocalSet)
				out = appendU32(out, fuelLocal)
			}
		case editFlush:
			out = m.appendFlush(out, fuelLocal)
		case editReload:
			out = m.appendReload(out, fuelLocal)
		case editRemap:
			out = appendU32(out, e.index)
			prev = e.end
		case editBulk:
			out = m.appendBulkCharge(out, e.shift, e.cost, e.free, fuelLocal, lengthLocal)
		case editGrowSave:
			out = append(out, opLocalTee)
			out = appendU32(out, lengthLocal)
		case editGrowCharge:
			out = m.appendGrowCharge(out, e.cost, fuelLocal, lengthLocal, resultLocal)
		}
	}
	return append(out, body[prev:]...), sh, nil
}

// appendRemap records the replacement of the function index immediate of the
// instruction at [start, end) when the rewrite shifts it.
func (m *module) appendRemap(edits []edit, start, end int, imm []byte) []edit {
	idx, _ := newReader(imm).u32("function index")
	if nidx := m.remapFunc(idx); nidx != idx {
		edits = append(edits, edit{at: start + 1, end: end, kind: editRemap, index: nidx})
	}
	return edits
}

// appendCheck appends, with the counter on the stack:
//
//	i64.const cost  i64.sub  <test>
func (m *module) appendCheck(out []byte, cost int64, local uint32) []byte {
	if cost < 1 {
		cost = 1
	}
	out = append(out, opI64Const)
	out = appendS64(out, cost)
	out = append(out, opI64Sub)
	return m.appendTest(out, local)
}

// appendTest appends, with the new counter on the stack:
//
//	local.tee $f  i64.const 0  i64.lt_s  if  <refuel>  end
func (m *module) appendTest(out []byte, local uint32) []byte {
	out = append(out, opLocalTee)
	out = appendU32(out, local)
	out = append(out, opI64Const, 0x00, opI64LtS, opIf, blockEmpty)
	out = m.appendRefuel(out, local)
	return append(out, opEnd)
}

// appendRefuel appends: <flush>  call $refuel  <reload>
func (m *module) appendRefuel(out []byte, local uint32) []byte {
	out = m.appendFlush(out, local)
	out = append(out, opCall)
	out = appendU32(out, m.refuelIndex)
	return m.appendReload(out, local)
}

// appendScaledCharge appends the counter less the operand saved in $n,
// shifted right by shift and multiplied by mul:
//
//	local.get $f  local.get $n  i64.extend_i32_u
//	[i64.const shift  i64.shr_u]  [i64.const mul  i64.mul]  i64.sub
func (m *module) appendScaledCharge(out []byte, shift, mul int64, fuel, length uint32) []byte {
	out = append(out, opLocalGet)
	out = appendU32(out, fuel)
	out = append(out, opLocalGet)
	out = appendU32(out, length)
	out = append(out, opI64ExtendI32U)
	if shift > 0 {
		out = append(out, opI64Const)
		out = appendS64(out, shift)
		out = append(out, opI64ShrU)
	}
	if mul != 1 {
		out = append(out, opI64Const)
		out = appendS64(out, mul)
		out = append(out, opI64Mul)
	}
	return append(out, opI64Sub)
}

// appendBulkCharge appends, with the instruction's length operand n on the
// stack:
//
//	local.tee $n  [local.get $n  i32.const free  i32.gt_u  if]
//	  <scaled charge>  <test>
//	[end]
//
// so the charge is made, and refuel called if the counter goes negative,
// before the instruction runs: an instruction whose charge is over the
// remaining budget never starts. Memory instructions of at most
// BulkMemoryFreeBytes skip the charge (free > 0): the Go runtime's memmove
// and memclr are bulk instructions of a few bytes, frequent enough that the
// charge doubled their cost, and at that size the instruction costs no more
// than the one unit it is already charged plus the instructions around it.
func (m *module) appendBulkCharge(out []byte, shift, mul, free int64, fuel, length uint32) []byte {
	out = append(out, opLocalTee)
	out = appendU32(out, length)
	if free > 0 {
		out = append(out, opLocalGet)
		out = appendU32(out, length)
		out = append(out, 0x41)
		out = appendS64(out, free)                // s32 and s64 LEB agree below 2^31
		out = append(out, 0x4b, opIf, blockEmpty) // i32.gt_u  if
	}
	out = m.appendScaledCharge(out, shift, mul, fuel, length)
	out = m.appendTest(out, fuel)
	if free > 0 {
		out = append(out, opEnd)
	}
	return out
}

// appendGrowCharge appends, right after a memory.grow or table.grow whose
// operand was saved in $n, with its result on the stack:
//
//	local.tee $r  i32.const -1  i32.ne  local.get $n  i32.const 0  i32.ne  i32.and
//	if  <scaled charge>  local.set $f  <refuel>  end
//	local.get $r
//
// A grow that added pages always calls refuel, whatever the counter: the host
// faults the new pages in while growing (package linmem), which takes real
// time, so the deadline is checked right after.
func (m *module) appendGrowCharge(out []byte, mul int64, fuel, length, result uint32) []byte {
	out = append(out, opLocalTee)
	out = appendU32(out, result)
	out = append(out, 0x41, 0x7f, 0x47, opLocalGet) // i32.const -1  i32.ne  local.get $n
	out = appendU32(out, length)
	out = append(out, 0x41, 0x00, 0x47, 0x71, opIf, blockEmpty) // i32.const 0  i32.ne  i32.and  if
	out = m.appendScaledCharge(out, 0, mul, fuel, length)
	out = append(out, opLocalSet)
	out = appendU32(out, fuel)
	out = m.appendRefuel(out, fuel)
	out = append(out, opEnd, opLocalGet)
	return appendU32(out, result)
}

// depthGlobal is the global index of the call depth, right after the fuel
// global.
func (m *module) depthGlobal() uint32 { return m.fuelGlobalIndex + 1 }

// appendDepthAdd appends: global.get $d  i32.const 1  <op>  global.set $d
func (m *module) appendDepthAdd(out []byte, op byte) []byte {
	out = append(out, opGlobalGet)
	out = appendU32(out, m.depthGlobal())
	out = append(out, 0x41, 0x01, op, opGlobalSet)
	return appendU32(out, m.depthGlobal())
}

// appendDepthCheck appends, at a function entry:
//
//	global.get $d  i32.const max  i32.gt_s
//	if  i64.const DepthExceeded  global.set $fuel  call $refuel  end
//
// Every call and call_indirect counts on the way in and out alike, host
// functions included, so the depth never goes below zero.
func (m *module) appendDepthCheck(out []byte) []byte {
	out = append(out, opGlobalGet)
	out = appendU32(out, m.depthGlobal())
	out = append(out, 0x41)
	out = appendS64(out, int64(m.maxCallDepth))           // s32 and s64 LEB agree below 2^31
	out = append(out, 0x4a, opIf, blockEmpty, opI64Const) // i32.gt_s
	out = appendS64(out, DepthExceeded)
	out = append(out, opGlobalSet)
	out = appendU32(out, m.fuelGlobalIndex)
	out = append(out, opCall)
	out = appendU32(out, m.refuelIndex)
	return append(out, opEnd)
}

// appendFlush appends: local.get $f  global.set $fuel
func (m *module) appendFlush(out []byte, local uint32) []byte {
	out = append(out, opLocalGet)
	out = appendU32(out, local)
	out = append(out, opGlobalSet)
	return appendU32(out, m.fuelGlobalIndex)
}

// appendReload appends: global.get $fuel  local.set $f
func (m *module) appendReload(out []byte, local uint32) []byte {
	out = append(out, opGlobalGet)
	out = appendU32(out, m.fuelGlobalIndex)
	out = append(out, opLocalSet)
	return appendU32(out, local)
}

// checkIndices refuses global and type indices past the end of the input's
// index spaces. The rewrite appends a global and possibly a type, so an index
// that was out of range (an invalid module) would otherwise come to name the
// fuel global or the refuel type and validate: a guest could then read or
// reset its own fuel.
func (m *module) checkIndices(op byte, imm []byte) error {
	r := newReader(imm)
	switch op {
	case opGlobalGet, opGlobalSet:
		idx, _ := r.u32("global index")
		return m.checkGlobal(idx)
	case opBlock, opLoop, opIf:
		bt, _ := r.s33("block type")
		if bt >= 0 {
			return m.checkType(uint32(bt))
		}
	case 0x11, 0x13: // call_indirect, return_call_indirect
		idx, _ := r.u32("type index")
		return m.checkType(idx)
	}
	return nil
}

func (m *module) checkGlobal(idx uint32) error {
	if idx >= m.numGlobals {
		return fmt.Errorf("unknown global %d (the module has %d)", idx, m.numGlobals)
	}
	return nil
}

func (m *module) checkType(idx uint32) error {
	if idx >= m.numTypes {
		return fmt.Errorf("unknown type %d (the module has %d)", idx, m.numTypes)
	}
	return nil
}

// skipInstruction consumes the immediates of op, which has been read. It
// decodes every opcode of WebAssembly 2.0 plus tail calls, and refuses the
// opcodes of proposals it cannot meter.
func skipInstruction(r *reader, op byte) error {
	switch {
	case op == 0x00, op == 0x01, op == 0x05, op == opEnd, op == 0x0f, op == 0x1a, op == 0x1b,
		op >= 0x45 && op <= 0xc4, op == 0xd1:
		return nil
	case op == opBlock, op == opLoop, op == opIf:
		_, err := r.s33("block type")
		return err
	case op == 0x0c, op == 0x0d: // br, br_if
		_, err := r.u32("label")
		return err
	case op == 0x0e: // br_table
		n, err := r.u32("br_table count")
		if err != nil {
			return err
		}
		for i := uint32(0); i <= n; i++ {
			if _, err := r.u32("br_table label"); err != nil {
				return err
			}
		}
		return nil
	case op == opCall, op == opReturnCall, op == opRefFunc:
		_, err := r.u32("function index")
		return err
	case op == 0x11, op == 0x13: // call_indirect, return_call_indirect
		if _, err := r.u32("type index"); err != nil {
			return err
		}
		_, err := r.u32("table index")
		return err
	case op == 0x1c: // select t*
		n, err := r.u32("select type count")
		if err != nil {
			return err
		}
		return r.skip(int(n), "select types")
	case op >= 0x20 && op <= 0x26: // local.*, global.*, table.get/set
		_, err := r.u32("index")
		return err
	case op >= 0x28 && op <= 0x3e:
		return skipMemarg(r)
	case op == 0x3f, op == 0x40: // memory.size, memory.grow
		_, err := r.u32("memory index")
		return err
	case op == 0x41:
		return r.s32("i32.const")
	case op == opI64Const:
		return r.s64("i64.const")
	case op == 0x43:
		return r.skip(4, "f32.const")
	case op == 0x44:
		return r.skip(8, "f64.const")
	case op == 0xd0: // ref.null heaptype
		_, err := r.s33("heap type")
		return err
	case op == 0xfc:
		return skipMisc(r)
	case op == 0xfd:
		return skipSIMD(r)
	case op >= 0x06 && op <= 0x0a, op == 0x18, op == 0x19, op == 0x1f:
		return &UnsupportedError{Feature: fmt.Sprintf("exception handling (opcode 0x%02x)", op)}
	case op == 0x14, op == 0x15, op >= 0xd3 && op <= 0xd6:
		return &UnsupportedError{Feature: fmt.Sprintf("typed function references (opcode 0x%02x)", op)}
	case op == 0xfb:
		return &UnsupportedError{Feature: "garbage collection (0xFB prefix)"}
	case op == 0xfe:
		return &UnsupportedError{Feature: "threads (0xFE prefix)"}
	}
	return fmt.Errorf("unknown opcode 0x%02x at offset %d", op, r.pos()-1)
}

func skipMemarg(r *reader) error {
	align, err := r.u32("memarg align")
	if err != nil {
		return err
	}
	if align&0x40 != 0 { // multi-memory: explicit memory index
		if _, err := r.u32("memarg memory index"); err != nil {
			return err
		}
	}
	_, err = r.u32("memarg offset")
	return err
}

func skipMisc(r *reader) error {
	sub, err := r.u32("0xFC sub-opcode")
	if err != nil {
		return err
	}
	var immediates int
	switch {
	case sub <= 7: // trunc_sat
	case sub == 8, sub == 10, sub == 12, sub == 14: // memory.init, memory.copy, table.init, table.copy
		immediates = 2
	case sub == 9, sub == 11, sub == 13, sub >= 15 && sub <= 17: // data.drop, memory.fill, elem.drop, table.grow/size/fill
		immediates = 1
	default:
		return &UnsupportedError{Feature: fmt.Sprintf("0xFC sub-opcode %d", sub)}
	}
	for i := 0; i < immediates; i++ {
		if _, err := r.u32("0xFC immediate"); err != nil {
			return err
		}
	}
	return nil
}

func skipSIMD(r *reader) error {
	sub, err := r.u32("0xFD sub-opcode")
	if err != nil {
		return err
	}
	switch {
	case sub <= 11, sub == 0x5c, sub == 0x5d: // loads, store, load*_zero
		return skipMemarg(r)
	case sub == 12, sub == 13: // v128.const, i8x16.shuffle
		return r.skip(16, "v128 immediate")
	case sub >= 0x15 && sub <= 0x22: // extract_lane, replace_lane
		return r.skip(1, "lane index")
	case sub >= 0x54 && sub <= 0x5b: // load*_lane, store*_lane
		if err := skipMemarg(r); err != nil {
			return err
		}
		return r.skip(1, "lane index")
	case sub <= 0x113: // the rest of SIMD and relaxed SIMD take no immediates
		return nil
	}
	return &UnsupportedError{Feature: fmt.Sprintf("0xFD sub-opcode 0x%x", sub)}
}
