package instrument

import (
	"bytes"
	"errors"
	"fmt"
)

// Section IDs of the wasm binary format.
const (
	secCustom    = 0
	secType      = 1
	secImport    = 2
	secFunction  = 3
	secTable     = 4
	secMemory    = 5
	secGlobal    = 6
	secExport    = 7
	secStart     = 8
	secElement   = 9
	secCode      = 10
	secData      = 11
	secDataCount = 12
	secTag       = 13
)

// sectionRank orders non-custom sections as the binary format requires.
var sectionRank = map[byte]int{
	secType: 1, secImport: 2, secFunction: 3, secTable: 4, secMemory: 5, secTag: 6,
	secGlobal: 7, secExport: 8, secStart: 9, secElement: 10, secDataCount: 11, secCode: 12, secData: 13,
}

// MalformedError reports module bytes that could not be decoded.
type MalformedError struct{ Reason string }

func (e *MalformedError) Error() string { return "malformed module: " + e.Reason }

// UnsupportedError reports a module that uses a WebAssembly feature the
// instrumenter cannot meter. Such a module is refused rather than run with
// a miscounted or missing fuel charge.
type UnsupportedError struct{ Feature string }

func (e *UnsupportedError) Error() string {
	return "unsupported WebAssembly feature: " + e.Feature + "; wasmreconcile meters WebAssembly 2.0 (core) modules plus tail calls"
}

type section struct {
	id      byte
	payload []byte
}

// module holds what the rewrite needs to know about the input.
type module struct {
	sections        []section
	numTypes        uint32
	typeParams      []uint32 // parameter count of each type
	funcTypes       []uint32 // type index of each defined function
	numFuncImports  uint32
	numGlobals      uint32 // imported and defined
	emptyFuncType   int64  // index of an existing (func) type, or -1
	refuelIndex     uint32 // function index of the added import
	fuelGlobalIndex uint32 // global index of the added global

	maxTableElements uint32       // Options.MaxTableElements
	maxCallDepth     uint32       // Options.MaxCallDepth
	maxFuncCost      uint64       // Options.MaxFunctionComplexity
	maxModuleCost    uint64       // Options.MaxModuleComplexity
	otherImport      *ImportError // the first import that is not a function
}

// remapFunc maps a function index of the input to the output.
func (m *module) remapFunc(i uint32) uint32 {
	if i < m.numFuncImports {
		return i
	}
	return i + 1
}

var magic = []byte{0x00, 'a', 's', 'm', 0x01, 0x00, 0x00, 0x00}

// Options configure the rewrite. The zero value adds metering only.
type Options struct {
	// MaxTableElements, when set, caps the elements of all the module's
	// tables together. The rewrite gives each table a maximum: its declared
	// maximum, lowered to its minimum plus an equal share of what the cap
	// leaves after every table's minimum. table.grow past it fails inside the
	// guest (returns -1). A module whose tables' minimums alone exceed the
	// cap is refused with a *LimitError.
	// Defaults to 0: tables keep their declared limits.
	MaxTableElements uint32

	// MaxCallDepth, when set, caps the depth of calls between the module's
	// functions: a call that would go deeper stops the call, as refuel
	// does, with the fuel global set to DepthExceeded. The rewrite keeps the
	// depth in an added global, incremented before and decremented after
	// every call and call_indirect (tail calls replace a frame and count
	// nothing); every function entry checks it.
	// Defaults to 0: no cap (wazero's own stack ceiling applies).
	MaxCallDepth uint32

	// FunctionImportsOnly refuses, with an *ImportError, a module that
	// imports a table, a memory, a global or a tag.
	// Defaults to false: any import is kept.
	FunctionImportsOnly bool

	// MaxFunctionComplexity, when set, refuses with a *ComplexityError a
	// module with a function whose complexity is over it. A function's
	// complexity is (locals + 1) * (control structures + 1), its locals
	// counting its parameters and its control structures its blocks,
	// loops and ifs: an optimizing compiler's SSA construction and
	// register allocation track every local across every block, and their
	// time and memory grow with this product (docs/metering.md, "Compile
	// bombs", measures it on wazero's compiler). It is computed as the
	// body is rewritten, in linear time.
	// Defaults to 0: no cap.
	MaxFunctionComplexity uint64

	// MaxModuleComplexity, when set, refuses with a *ComplexityError a
	// module whose functions' complexities add up to more: many functions
	// each under MaxFunctionComplexity still add up their compile times.
	// Defaults to 0: no cap.
	MaxModuleComplexity uint64
}

// ComplexityError reports a module whose code would cost a compiler
// far more than its size suggests (Options.MaxFunctionComplexity,
// MaxModuleComplexity).
type ComplexityError struct {
	// Function is the index of the function over MaxFunctionComplexity
	// (imports included, as in the input); -1 when the module's total is
	// over MaxModuleComplexity.
	Function int64
	// Locals and Blocks are the function's locals (with its parameters)
	// and control structures; zero for the module's total.
	Locals, Blocks uint64
	// Complexity is the function's, or the module's total; Max the cap.
	Complexity, Max uint64
}

func (e *ComplexityError) Error() string {
	if e.Function < 0 {
		return fmt.Sprintf("the functions' compile complexity adds up to %d, over the limit of %d", e.Complexity, e.Max)
	}
	return fmt.Sprintf("function %d has %d locals and %d blocks, loops and ifs: compile complexity (locals+1)*(blocks+1) = %d, over the limit of %d",
		e.Function, e.Locals, e.Blocks, e.Complexity, e.Max)
}

// ImportError reports an import the host never provides: a table, a memory,
// a global or a tag. The engine provides functions only.
type ImportError struct {
	Module, Name string
	Kind         string // "table", "memory", "global" or "tag"
}

func (e *ImportError) Error() string {
	return fmt.Sprintf("imports %s %s.%s; the host provides functions only (%s and WASI preview1), so guests must define their own tables, memory and globals",
		e.Kind, e.Module, e.Name, "wasmreconcile")
}

// LimitError reports a module that needs more than a cap at instantiation.
type LimitError struct{ Reason string }

func (e *LimitError) Error() string { return e.Reason }

// Instrument returns a metered copy of the module in wasm, with
// Options{}. See Options.Instrument.
func Instrument(wasm []byte) ([]byte, error) { return Options{}.Instrument(wasm) }

// Instrument returns a metered copy of the module in wasm. See the package
// documentation for what it adds. It returns a *MalformedError for bytes it
// cannot decode, an *UnsupportedError for features it cannot meter, an
// *ImportError for an import other than a function and a *LimitError for
// tables over MaxTableElements. It does not otherwise validate the module:
// the engine validates the input with wazero before, and the output again
// when it compiles it.
func (o Options) Instrument(wasm []byte) ([]byte, error) {
	m, err := parse(wasm)
	if err != nil {
		return nil, err
	}
	if o.FunctionImportsOnly && m.otherImport != nil {
		return nil, m.otherImport
	}
	m.maxTableElements = o.MaxTableElements
	m.maxCallDepth = o.MaxCallDepth
	m.maxFuncCost, m.maxModuleCost = o.MaxFunctionComplexity, o.MaxModuleComplexity
	return m.rewrite()
}

func parse(wasm []byte) (*module, error) {
	if len(wasm) < 8 || !bytes.Equal(wasm[:8], magic) {
		return nil, &MalformedError{Reason: "missing wasm magic number and version 1 header"}
	}
	m := &module{emptyFuncType: -1}
	r := newReader(wasm[8:])
	last := 0
	for !r.done() {
		id, err := r.byte("section id")
		if err != nil {
			return nil, &MalformedError{Reason: err.Error()}
		}
		size, err := r.u32("section size")
		if err != nil {
			return nil, &MalformedError{Reason: err.Error()}
		}
		payload, err := r.bytes(int(size), fmt.Sprintf("section %d", id))
		if err != nil {
			return nil, &MalformedError{Reason: err.Error()}
		}
		if id != secCustom {
			rank, ok := sectionRank[id]
			if !ok {
				return nil, &MalformedError{Reason: fmt.Sprintf("unknown section id %d", id)}
			}
			if rank <= last {
				return nil, &MalformedError{Reason: fmt.Sprintf("section %d out of order or repeated", id)}
			}
			last = rank
		}
		if id == secTag {
			return nil, &UnsupportedError{Feature: "exception handling (tag section)"}
		}
		m.sections = append(m.sections, section{id: id, payload: payload})
	}
	for _, s := range m.sections {
		var err error
		switch s.id {
		case secType:
			err = m.scanTypes(s.payload)
		case secImport:
			err = m.scanImports(s.payload)
		case secMemory:
			err = scanMemories(s.payload)
		case secFunction:
			err = m.scanFunctions(s.payload)
		case secGlobal:
			var n uint32
			n, err = newReader(s.payload).u32("global count")
			m.numGlobals += n
		}
		if err != nil {
			var u *UnsupportedError
			if errors.As(err, &u) {
				return nil, err
			}
			return nil, &MalformedError{Reason: err.Error()}
		}
	}
	m.refuelIndex = m.numFuncImports
	m.fuelGlobalIndex = m.numGlobals
	return m, nil
}

func (m *module) scanTypes(p []byte) error {
	r := newReader(p)
	n, err := r.u32("type count")
	if err != nil {
		return err
	}
	m.numTypes = n
	for i := uint32(0); i < n; i++ {
		form, err := r.byte("type form")
		if err != nil {
			return err
		}
		if form != 0x60 {
			return &UnsupportedError{Feature: fmt.Sprintf("type form 0x%x (GC or typed function references)", form)}
		}
		np, err := r.u32("param count")
		if err != nil {
			return err
		}
		if err := r.skip(int(np), "param types"); err != nil {
			return err
		}
		nr, err := r.u32("result count")
		if err != nil {
			return err
		}
		if err := r.skip(int(nr), "result types"); err != nil {
			return err
		}
		m.typeParams = append(m.typeParams, np)
		if np == 0 && nr == 0 && m.emptyFuncType < 0 {
			m.emptyFuncType = int64(i)
		}
	}
	return nil
}

// scanFunctions checks the type index of every defined function.
func (m *module) scanFunctions(p []byte) error {
	r := newReader(p)
	n, err := r.u32("function count")
	if err != nil {
		return err
	}
	for i := uint32(0); i < n; i++ {
		t, err := r.u32("function type index")
		if err != nil {
			return err
		}
		if err := m.checkType(t); err != nil {
			return err
		}
		m.funcTypes = append(m.funcTypes, t)
	}
	return nil
}

func (m *module) scanImports(p []byte) error {
	r := newReader(p)
	n, err := r.u32("import count")
	if err != nil {
		return err
	}
	for i := uint32(0); i < n; i++ {
		mod, err := r.name("import module")
		if err != nil {
			return err
		}
		if string(mod) == ImportModule {
			return &MalformedError{Reason: fmt.Sprintf("module already imports from %q, which is reserved for the host", ImportModule)}
		}
		name, err := r.name("import name")
		if err != nil {
			return err
		}
		kind, err := r.byte("import kind")
		if err != nil {
			return err
		}
		switch kind {
		case 0: // func
			t, err := r.u32("import type index")
			if err != nil {
				return err
			}
			if err := m.checkType(t); err != nil {
				return err
			}
			m.numFuncImports++
		case 1: // table
			m.noteImport(mod, name, "table")
			if _, err := r.byte("table ref type"); err != nil {
				return err
			}
			if err := skipLimits(r); err != nil {
				return err
			}
		case 2: // memory
			m.noteImport(mod, name, "memory")
			if err := skipLimits(r); err != nil {
				return err
			}
		case 3: // global
			m.noteImport(mod, name, "global")
			if err := r.skip(2, "global type"); err != nil {
				return err
			}
			m.numGlobals++
		case 4:
			return &UnsupportedError{Feature: "exception handling (tag import)"}
		default:
			return fmt.Errorf("unknown import kind %d", kind)
		}
	}
	return nil
}

// scanMemories refuses 64-bit and shared memories, which the host does not
// support.
func scanMemories(p []byte) error {
	r := newReader(p)
	n, err := r.u32("memory count")
	if err != nil {
		return err
	}
	for i := uint32(0); i < n; i++ {
		flags, err := r.u32("memory limits flags")
		if err != nil {
			return err
		}
		switch {
		case flags&4 != 0:
			return &UnsupportedError{Feature: "64-bit memory (memory64)"}
		case flags&2 != 0:
			return &UnsupportedError{Feature: "shared memory (threads)"}
		case flags > 1:
			return fmt.Errorf("memory %d: unknown limits flags 0x%x", i, flags)
		}
		if _, err := r.u32("memory min"); err != nil {
			return err
		}
		if flags&1 != 0 {
			if _, err := r.u32("memory max"); err != nil {
				return err
			}
		}
	}
	return nil
}

func (m *module) noteImport(mod, name []byte, kind string) {
	if m.otherImport == nil {
		m.otherImport = &ImportError{Module: string(mod), Name: string(name), Kind: kind}
	}
}

func skipLimits(r *reader) error {
	flags, err := r.u32("limits flags")
	if err != nil {
		return err
	}
	if _, err := r.u32("limits min"); err != nil {
		return err
	}
	if flags&1 != 0 {
		if _, err := r.u32("limits max"); err != nil {
			return err
		}
	}
	return nil
}

// rewrite produces the instrumented module.
func (m *module) rewrite() ([]byte, error) {
	out := append([]byte(nil), magic...)
	have := map[byte]bool{}
	for _, s := range m.sections {
		have[s.id] = true
	}
	// Sections the rewrite must add to, created empty when absent.
	var pending []byte
	for _, id := range []byte{secType, secImport, secGlobal, secExport} {
		if !have[id] {
			pending = append(pending, id)
		}
	}
	emit := func(id byte, payload []byte) {
		out = append(out, id)
		out = appendU32(out, uint32(len(payload)))
		out = append(out, payload...)
	}
	flushBefore := func(rank int) error {
		for len(pending) > 0 && sectionRank[pending[0]] < rank {
			p, err := m.rewriteSection(pending[0], emptyVec)
			if err != nil {
				return err
			}
			emit(pending[0], p)
			pending = pending[1:]
		}
		return nil
	}
	for _, s := range m.sections {
		if s.id != secCustom {
			if err := flushBefore(sectionRank[s.id]); err != nil {
				return nil, err
			}
		}
		p, err := m.rewriteSection(s.id, s.payload)
		if err != nil {
			return nil, err
		}
		if p == nil { // dropped
			continue
		}
		// A custom section named "name" is rewritten by rewriteSection too.
		emit(s.id, p)
	}
	if err := flushBefore(1 << 30); err != nil {
		return nil, err
	}
	return out, nil
}

var emptyVec = []byte{0x00}

func (m *module) rewriteSection(id byte, p []byte) ([]byte, error) {
	var (
		out []byte
		err error
	)
	switch id {
	case secType:
		out, err = m.rewriteTypes(p)
	case secImport:
		out, err = m.rewriteImports(p)
	case secGlobal:
		out, err = m.rewriteGlobals(p)
	case secExport:
		out, err = m.rewriteExports(p)
	case secStart:
		out, err = m.rewriteStart(p)
	case secElement:
		out, err = m.rewriteElements(p)
	case secTable:
		out, err = m.rewriteTables(p)
	case secCode:
		out, err = m.rewriteCode(p)
	case secCustom:
		out, err = m.rewriteCustom(p)
	default:
		return p, nil
	}
	if err != nil {
		var (
			u *UnsupportedError
			l *LimitError
			c *ComplexityError
		)
		if errors.As(err, &u) || errors.As(err, &l) || errors.As(err, &c) {
			return nil, err
		}
		return nil, &MalformedError{Reason: fmt.Sprintf("section %d: %v", id, err)}
	}
	return out, nil
}

// rewriteTables refuses table types of proposals the host does not support
// and, under a MaxTableElements cap, gives every table a maximum so that the
// maximums together fit the cap.
func (m *module) rewriteTables(p []byte) ([]byte, error) {
	r := newReader(p)
	n, err := r.u32("table count")
	if err != nil {
		return nil, err
	}
	type table struct {
		ref      byte
		min, max uint32
		hasMax   bool
	}
	tables := make([]table, 0, min(n, 1024))
	var sumMin uint64
	for i := uint32(0); i < n; i++ {
		ref, err := r.byte("table reference type")
		if err != nil {
			return nil, err
		}
		switch ref {
		case 0x70, 0x6f: // funcref, externref
		case 0x40, 0x63, 0x64:
			return nil, &UnsupportedError{Feature: fmt.Sprintf("typed function references (table %d of type 0x%02x)", i, ref)}
		default:
			return nil, fmt.Errorf("table %d: unknown reference type 0x%02x", i, ref)
		}
		flags, err := r.u32("table limits flags")
		if err != nil {
			return nil, err
		}
		if flags > 1 {
			return nil, &UnsupportedError{Feature: fmt.Sprintf("table %d limits flags 0x%x (table64 or shared tables)", i, flags)}
		}
		t := table{ref: ref, hasMax: flags == 1}
		if t.min, err = r.u32("table min"); err != nil {
			return nil, err
		}
		if t.hasMax {
			if t.max, err = r.u32("table max"); err != nil {
				return nil, err
			}
		}
		sumMin += uint64(t.min)
		tables = append(tables, t)
	}
	if !r.done() {
		return nil, fmt.Errorf("%d trailing bytes", len(p)-r.pos())
	}
	if m.maxTableElements == 0 {
		return p, nil
	}
	if sumMin > uint64(m.maxTableElements) {
		return nil, &LimitError{Reason: fmt.Sprintf("tables need %d elements at instantiation, over the cap of %d; raise --max-table-elements or declare smaller tables", sumMin, m.maxTableElements)}
	}
	share := (uint64(m.maxTableElements) - sumMin) / uint64(max(n, 1))
	out := appendU32(nil, n)
	for _, t := range tables {
		limit := uint64(t.min) + share
		if t.hasMax && uint64(t.max) < limit {
			limit = uint64(t.max)
		}
		out = append(out, t.ref, 0x01)
		out = appendU32(out, t.min)
		out = appendU32(out, uint32(limit))
	}
	return out, nil
}

// refuelType is the type index of the refuel import.
func (m *module) refuelType() uint32 {
	if m.emptyFuncType >= 0 {
		return uint32(m.emptyFuncType)
	}
	return m.numTypes
}

func (m *module) rewriteTypes(p []byte) ([]byte, error) {
	r := newReader(p)
	n, err := r.u32("type count")
	if err != nil {
		return nil, err
	}
	if m.emptyFuncType >= 0 {
		return p, nil
	}
	out := appendU32(nil, n+1)
	out = append(out, p[r.pos():]...)
	return append(out, 0x60, 0x00, 0x00), nil
}

func (m *module) rewriteImports(p []byte) ([]byte, error) {
	r := newReader(p)
	n, err := r.u32("import count")
	if err != nil {
		return nil, err
	}
	out := appendU32(nil, n+1)
	out = append(out, p[r.pos():]...)
	out = appendU32(out, uint32(len(ImportModule)))
	out = append(out, ImportModule...)
	out = appendU32(out, uint32(len(ImportRefuel)))
	out = append(out, ImportRefuel...)
	out = append(out, 0x00)
	return appendU32(out, m.refuelType()), nil
}

func (m *module) rewriteGlobals(p []byte) ([]byte, error) {
	r := newReader(p)
	n, err := r.u32("global count")
	if err != nil {
		return nil, err
	}
	added := uint32(1)
	if m.maxCallDepth > 0 {
		added = 2
	}
	out := appendU32(nil, n+added)
	for i := uint32(0); i < n; i++ {
		gt, err := r.bytes(2, "global type")
		if err != nil {
			return nil, err
		}
		out = append(out, gt...)
		if out, err = m.copyConstExpr(r, out); err != nil {
			return nil, err
		}
	}
	if !r.done() {
		return nil, fmt.Errorf("%d trailing bytes", len(p)-r.pos())
	}
	// (global (mut i64) (i64.const 0)), then the depth global
	// (global (mut i32) (i32.const 0)) when calls are capped.
	out = append(out, 0x7e, 0x01, 0x42, 0x00, 0x0b)
	if m.maxCallDepth > 0 {
		out = append(out, 0x7f, 0x01, 0x41, 0x00, 0x0b)
	}
	return out, nil
}

// copyConstExpr copies a constant expression, remapping ref.func.
func (m *module) copyConstExpr(r *reader, out []byte) ([]byte, error) {
	for {
		start := r.pos()
		op, err := r.byte("constant expression opcode")
		if err != nil {
			return nil, err
		}
		switch op {
		case 0x0b: // end
			return append(out, op), nil
		case 0xd2: // ref.func
			idx, err := r.u32("ref.func index")
			if err != nil {
				return nil, err
			}
			out = append(out, op)
			out = appendU32(out, m.remapFunc(idx))
			continue
		}
		if err := skipInstruction(r, op); err != nil {
			return nil, err
		}
		if err := m.checkIndices(op, r.buf[start+1:r.pos()]); err != nil {
			return nil, err
		}
		out = append(out, r.buf[start:r.pos()]...)
	}
}

func (m *module) rewriteExports(p []byte) ([]byte, error) {
	r := newReader(p)
	n, err := r.u32("export count")
	if err != nil {
		return nil, err
	}
	out := appendU32(nil, n+1)
	for i := uint32(0); i < n; i++ {
		name, err := r.name("export name")
		if err != nil {
			return nil, err
		}
		if string(name) == ExportFuel {
			return nil, fmt.Errorf("module already exports %q, which is reserved for the host", ExportFuel)
		}
		kind, err := r.byte("export kind")
		if err != nil {
			return nil, err
		}
		idx, err := r.u32("export index")
		if err != nil {
			return nil, err
		}
		switch kind {
		case 0:
			idx = m.remapFunc(idx)
		case 3:
			if err := m.checkGlobal(idx); err != nil {
				return nil, err
			}
		}
		out = appendU32(out, uint32(len(name)))
		out = append(out, name...)
		out = append(out, kind)
		out = appendU32(out, idx)
	}
	if !r.done() {
		return nil, fmt.Errorf("%d trailing bytes", len(p)-r.pos())
	}
	out = appendU32(out, uint32(len(ExportFuel)))
	out = append(out, ExportFuel...)
	out = append(out, 0x03)
	return appendU32(out, m.fuelGlobalIndex), nil
}

func (m *module) rewriteStart(p []byte) ([]byte, error) {
	r := newReader(p)
	idx, err := r.u32("start function index")
	if err != nil {
		return nil, err
	}
	if !r.done() {
		return nil, fmt.Errorf("%d trailing bytes", len(p)-r.pos())
	}
	return appendU32(nil, m.remapFunc(idx)), nil
}

func (m *module) rewriteElements(p []byte) ([]byte, error) {
	r := newReader(p)
	n, err := r.u32("element count")
	if err != nil {
		return nil, err
	}
	out := appendU32(nil, n)
	for i := uint32(0); i < n; i++ {
		flags, err := r.u32("element flags")
		if err != nil {
			return nil, err
		}
		if flags > 7 {
			return nil, fmt.Errorf("element segment %d: unknown flags %d", i, flags)
		}
		out = appendU32(out, flags)
		active := flags&1 == 0
		explicitTable := flags&2 != 0
		exprs := flags&4 != 0
		if active && explicitTable {
			t, err := r.u32("element table index")
			if err != nil {
				return nil, err
			}
			out = appendU32(out, t)
		}
		if active {
			if out, err = m.copyConstExpr(r, out); err != nil {
				return nil, err
			}
		}
		if !active || explicitTable { // elemkind or reftype byte
			b, err := r.byte("element kind")
			if err != nil {
				return nil, err
			}
			out = append(out, b)
		}
		count, err := r.u32("element init count")
		if err != nil {
			return nil, err
		}
		out = appendU32(out, count)
		for j := uint32(0); j < count; j++ {
			if exprs {
				if out, err = m.copyConstExpr(r, out); err != nil {
					return nil, err
				}
				continue
			}
			idx, err := r.u32("element function index")
			if err != nil {
				return nil, err
			}
			out = appendU32(out, m.remapFunc(idx))
		}
	}
	if !r.done() {
		return nil, fmt.Errorf("%d trailing bytes", len(p)-r.pos())
	}
	return out, nil
}

// rewriteCustom remaps the function indices of the "name" section and keeps
// every other custom section as it is. A name section that cannot be decoded
// is dropped: it is debug information only.
func (m *module) rewriteCustom(p []byte) ([]byte, error) {
	r := newReader(p)
	name, err := r.name("custom section name")
	if err != nil {
		return nil, err
	}
	if string(name) != "name" {
		return p, nil
	}
	prefixEnd := r.pos()
	subsections, err := m.rewriteNames(r)
	if err != nil {
		return nil, nil // drop
	}
	return append(append([]byte(nil), p[:prefixEnd]...), subsections...), nil
}
