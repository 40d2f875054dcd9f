package testwasm

import "encoding/binary"

// CompileBomb returns a valid ABI v1 module whose manifest is manifest (a
// JSON document) and whose wr_reconcile has locals i32 locals and ifs ifs,
// each reading one local and setting another: a module of a few tens of
// kilobytes that costs an optimizing compiler time and memory in
// proportion to locals*ifs (docs/metering.md, "Compile bombs"). Its
// reconcile answers {} without looping. With locals 4000 and ifs 4000 it is
// 48 KB and costs wazero's compiler about 20 s of CPU and 900 MB.
//
// The module is written byte by byte here, not with wat2wasm, so that
// tests can scale it.
func CompileBomb(locals, ifs int, manifest string) []byte {
	var out []byte
	out = append(out, 0x00, 'a', 's', 'm', 0x01, 0x00, 0x00, 0x00)
	section := func(id byte, payload []byte) {
		out = append(out, id)
		out = binary.AppendUvarint(out, uint64(len(payload)))
		out = append(out, payload...)
	}
	u := func(b []byte, v uint64) []byte { return binary.AppendUvarint(b, v) }
	name := func(b []byte, s string) []byte { return append(u(b, uint64(len(s))), s...) }
	const i32, i64 = 0x7f, 0x7e

	// Types: () -> (), (i32) -> i32, () -> i64, (i32 i32) -> i64.
	types := u(nil, 4)
	types = append(types, 0x60, 0, 0)
	types = append(types, 0x60, 1, i32, 1, i32)
	types = append(types, 0x60, 0, 1, i64)
	types = append(types, 0x60, 2, i32, i32, 1, i64)
	section(1, types)
	// Functions: wr_abi_v1, _initialize, wr_alloc, wr_manifest, wr_reconcile.
	section(3, []byte{5, 0, 0, 1, 2, 3})
	// One memory of 1 page.
	section(5, []byte{1, 0x00, 1})
	exports := u(nil, 6)
	for i, n := range []string{"wr_abi_v1", "_initialize", "wr_alloc", "wr_manifest", "wr_reconcile"} {
		exports = name(exports, n)
		exports = append(exports, 0x00, byte(i))
	}
	exports = name(exports, "memory")
	exports = append(exports, 0x02, 0)
	section(7, exports)

	body := func(code []byte) []byte { return append(u(nil, uint64(len(code))), code...) }
	code := u(nil, 5)
	code = append(code, body([]byte{0, 0x0b})...)
	code = append(code, body([]byte{0, 0x0b})...)
	code = append(code, body(append(appendSLEB([]byte{0, 0x41}, 8192), 0x0b))...) // requests at 8192, past the manifest and the answer
	manifestCall := []byte{0, 0x42}                                               // i64.const len (at 0)
	manifestCall = appendSLEB(manifestCall, int64(len(manifest)))
	code = append(code, body(append(manifestCall, 0x0b))...)
	n := locals + 2 // the two parameters are locals too
	rec := []byte{1}
	rec = u(rec, uint64(locals))
	rec = append(rec, i32)
	for j := 0; j < ifs; j++ {
		rec = append(rec, 0x20) // local.get
		rec = u(rec, uint64(j%n))
		rec = append(rec, 0x04, 0x40, 0x41) // if (no result) i32.const
		rec = appendSLEB(rec, int64(j))
		rec = append(rec, 0x21) // local.set
		rec = u(rec, uint64((j*7+1)%n))
		rec = append(rec, 0x0b) // end
	}
	// Answer "{}", written at 4096 by the data segment below.
	rec = append(rec, 0x42)
	rec = appendSLEB(rec, 4096<<32|2)
	rec = append(rec, 0x0b)
	code = append(code, body(rec)...)
	section(10, code)

	data := u(nil, 2)
	data = append(data, 0, 0x41, 0, 0x0b) // active, memory 0, offset i32.const 0
	data = name(data, manifest)
	data = append(data, 0, 0x41, 0x80, 0x20, 0x0b) // offset 4096
	data = name(data, "{}")
	section(11, data)
	return out
}

func appendSLEB(b []byte, v int64) []byte {
	for {
		c := byte(v & 0x7f)
		v >>= 7
		if (v == 0 && c&0x40 == 0) || (v == -1 && c&0x40 != 0) {
			return append(b, c)
		}
		b = append(b, c|0x80)
	}
}
