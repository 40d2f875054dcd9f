package spectest_test

// Value parsing and comparison helpers for the spec test runner in
// spectest_test.go.
//
// Adapted from wazero's internal/integration_test/spectest/spectest.go
// (github.com/tetratelabs/wazero v1.12.0, Apache License 2.0). The wazero
// internal packages it uses (moremath, wasm) are replaced by the local
// constants below and by api.ValueType.

import (
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"
	"testing"

	"github.com/tetratelabs/wazero/api"
)

// Value types that package api does not name. The encodings are the ones of
// the WebAssembly binary format, which api.ValueType uses.
const (
	valueTypeV128    api.ValueType = 0x7b
	valueTypeFuncref api.ValueType = 0x70
	valueTypeExnref  api.ValueType = 0x69
)

// NaN bit patterns (from wazero's internal/moremath).
const (
	f32CanonicalNaNBits        = uint32(0x7fc0_0000)
	f32CanonicalNaNBitsMask    = uint32(0x7fff_ffff)
	f32ArithmeticNaNPayloadMSB = uint32(0x0040_0000)
	f32ExponentMask            = uint32(0x7f80_0000)
	f32ArithmeticNaNBits       = f32CanonicalNaNBits | 0b1

	f64CanonicalNaNBits        = uint64(0x7ff8_0000_0000_0000)
	f64CanonicalNaNBitsMask    = uint64(0x7fff_ffff_ffff_ffff)
	f64ArithmeticNaNPayloadMSB = uint64(0x0008_0000_0000_0000)
	f64ExponentMask            = uint64(0x7ff0_0000_0000_0000)
	f64ArithmeticNaNBits       = f64CanonicalNaNBits | 0b1
)

// The wast2json output format.
// See https://github.com/WebAssembly/wabt/blob/main/docs/wast2json.md
type (
	testbase struct {
		SourceFile string    `json:"source_filename"`
		Commands   []command `json:"commands"`
	}
	command struct {
		CommandType string `json:"type"`
		Line        int    `json:"line"`

		// Set when type == "module" || "register"
		Name string `json:"name,omitempty"`

		// Set when type == "module" || "assert_uninstantiable" || "assert_malformed" ...
		Filename string `json:"filename,omitempty"`

		// Set when type == "register"
		As string `json:"as,omitempty"`

		// Set when type == "assert_return" || "action" || "assert_trap" ...
		Action commandAction      `json:"action"`
		Exps   []commandActionVal `json:"expected"`

		// Set when type == "assert_malformed" || "assert_invalid" ...
		ModuleType string `json:"module_type"`

		// Set when type == "assert_trap" ...
		Text string `json:"text"`
	}

	commandAction struct {
		ActionType string             `json:"type"`
		Args       []commandActionVal `json:"args"`

		// Set when ActionType == "invoke" || "get"
		Field  string `json:"field,omitempty"`
		Module string `json:"module,omitempty"`
	}

	commandActionVal struct {
		ValType string `json:"type"`
		// LaneType is not empty if ValType == "v128"
		LaneType laneType `json:"lane_type"`
		Value    any      `json:"value"`
	}
)

// laneType is the type of each lane of a v128 value.
type laneType = string

const (
	laneTypeI8  laneType = "i8"
	laneTypeI16 laneType = "i16"
	laneTypeI32 laneType = "i32"
	laneTypeI64 laneType = "i64"
	laneTypeF32 laneType = "f32"
	laneTypeF64 laneType = "f64"
)

func (c commandActionVal) String() string {
	if c.ValType == "v128" {
		if vs, ok := c.Value.([]any); ok {
			strs := make([]string, 0, len(vs))
			for _, v := range vs {
				strs = append(strs, fmt.Sprint(v))
			}
			return fmt.Sprintf("%s:[%s]", c.LaneType+"x", strings.Join(strs, ","))
		}
	}
	if c.Value == nil {
		return c.ValType + ":*"
	}
	return fmt.Sprintf("%s:%v", c.ValType, c.Value)
}

func (c command) getAssertReturnArgs() ([]uint64, error) {
	var args []uint64
	for _, arg := range c.Action.Args {
		vs, err := arg.toUint64s()
		if err != nil {
			return nil, err
		}
		args = append(args, vs...)
	}
	return args, nil
}

func (c command) getAssertReturnArgsExps() (args, exps []uint64, err error) {
	if args, err = c.getAssertReturnArgs(); err != nil {
		return nil, nil, err
	}
	for _, exp := range c.Exps {
		vs, err := exp.toUint64s()
		if err != nil {
			return nil, nil, err
		}
		exps = append(exps, vs...)
	}
	return args, exps, nil
}

func (c commandActionVal) toUint64s() ([]uint64, error) {
	if c.ValType != "v128" {
		v, err := c.toUint64()
		return []uint64{v}, err
	}
	strValues, ok := c.Value.([]any)
	if !ok {
		return nil, fmt.Errorf("v128 value is %T, not a list", c.Value)
	}
	var width, valNum int
	switch c.LaneType {
	case laneTypeI8:
		width, valNum = 8, 16
	case laneTypeI16:
		width, valNum = 16, 8
	case laneTypeI32, laneTypeF32:
		width, valNum = 32, 4
	case laneTypeI64, laneTypeF64:
		width, valNum = 64, 2
	default:
		return nil, fmt.Errorf("unknown lane type %q", c.LaneType)
	}
	if len(strValues) != valNum {
		return nil, fmt.Errorf("v128 %s lanes: got %d values, want %d", c.LaneType, len(strValues), valNum)
	}
	lo, hi, err := buildLaneUint64(strValues, width, valNum)
	return []uint64{lo, hi}, err
}

func buildLaneUint64(raw []any, width, valNum int) (lo, hi uint64, err error) {
	for i := range valNum {
		str, ok := raw[i].(string)
		if !ok {
			return 0, 0, fmt.Errorf("lane %d is %T, not a string", i, raw[i])
		}
		var v uint64
		if strings.Contains(str, "nan") {
			if v, err = getNaNBits(str, width == 32); err != nil {
				return 0, 0, err
			}
		} else if v, err = parseInt(str, width); err != nil {
			return 0, 0, err
		}
		if half := valNum / 2; i < half {
			lo |= v << (i * width)
		} else {
			hi |= v << ((i - half) * width)
		}
	}
	return lo, hi, nil
}

// parseInt parses an unsigned (or, as some wast2json versions emit, signed)
// decimal of the given bit width and returns its bits zero-extended.
func parseInt(s string, width int) (uint64, error) {
	if strings.HasPrefix(s, "-") {
		v, err := strconv.ParseInt(s, 10, width)
		if err != nil {
			return 0, err
		}
		if width == 64 {
			return uint64(v), nil
		}
		return uint64(v) & (1<<width - 1), nil
	}
	return strconv.ParseUint(s, 10, width)
}

// getNaNBits returns the bits used to represent the expected-value patterns
// "nan:canonical" and "nan:arithmetic"; f32Equal and f64Equal recognise them.
func getNaNBits(s string, is32bit bool) (uint64, error) {
	switch {
	case s == "nan:canonical" && is32bit:
		return uint64(f32CanonicalNaNBits), nil
	case s == "nan:arithmetic" && is32bit:
		return uint64(f32ArithmeticNaNBits), nil
	case s == "nan:canonical":
		return f64CanonicalNaNBits, nil
	case s == "nan:arithmetic":
		return f64ArithmeticNaNBits, nil
	}
	return 0, fmt.Errorf("unknown NaN pattern %q", s)
}

func (c commandActionVal) toUint64() (uint64, error) {
	if c.Value == nil || c.Value == "null" {
		return 0, nil
	}
	s, ok := c.Value.(string)
	if !ok {
		return 0, fmt.Errorf("%s value is %T, not a string", c.ValType, c.Value)
	}
	switch {
	case strings.Contains(s, "nan"):
		return getNaNBits(s, c.ValType == "f32")
	case c.ValType == "externref":
		// In wazero an externref is an opaque pointer and 0 is null, so
		// "externref 0" of the spec is represented as 1 (as wazero's harness does).
		v, err := strconv.ParseUint(s, 10, 64)
		return v + 1, err
	case strings.Contains(c.ValType, "32"):
		return parseInt(s, 32)
	default:
		return parseInt(s, 64)
	}
}

// valuesEq reports whether actual matches exps, both in the []uint64 encoding
// of api.Function.Call (a v128 takes two words, low then high).
//   - valTypes holds the Wasm types of the values.
//   - laneTypes maps an index of valTypes to its lane type when it is a v128.
//   - skipIndices holds indexes of valTypes whose value is not compared ("any ref").
//
// When they do not match, valuesMsg describes both.
func valuesEq(actual, exps []uint64, valTypes []api.ValueType, laneTypes map[int]laneType, skipIndices map[int]bool) (matched bool, valuesMsg string) {
	matched = true
	var expStrs, actualStrs []string
	pos := 0 // index into actual and exps
	for i, tp := range valTypes {
		width := 1
		if tp == valueTypeV128 {
			width = 2
		}
		if pos+width > len(actual) || pos+width > len(exps) {
			return false, fmt.Sprintf("\tresult count mismatch: have %d words, want %d, types %v", len(actual), len(exps), valTypes)
		}
		if skipIndices[i] {
			expStrs = append(expStrs, "*")
			actualStrs = append(actualStrs, "*")
			pos += width
			continue
		}
		a, e := actual[pos], exps[pos]
		switch tp {
		case api.ValueTypeI32:
			expStrs = append(expStrs, fmt.Sprintf("%d", uint32(e)))
			actualStrs = append(actualStrs, fmt.Sprintf("%d", uint32(a)))
			matched = matched && uint32(e) == uint32(a)
		case api.ValueTypeI64, api.ValueTypeExternref, valueTypeFuncref, valueTypeExnref:
			expStrs = append(expStrs, fmt.Sprintf("%d", e))
			actualStrs = append(actualStrs, fmt.Sprintf("%d", a))
			matched = matched && e == a
		case api.ValueTypeF32:
			ef, af := math.Float32frombits(uint32(e)), math.Float32frombits(uint32(a))
			expStrs = append(expStrs, fmt.Sprintf("%f", ef))
			actualStrs = append(actualStrs, fmt.Sprintf("%f", af))
			matched = matched && f32Equal(ef, af)
		case api.ValueTypeF64:
			ef, af := math.Float64frombits(e), math.Float64frombits(a)
			expStrs = append(expStrs, fmt.Sprintf("%f", ef))
			actualStrs = append(actualStrs, fmt.Sprintf("%f", af))
			matched = matched && f64Equal(ef, af)
		case valueTypeV128:
			aHi, eHi := actual[pos+1], exps[pos+1]
			es, as, ok := v128Eq(laneTypes[i], a, aHi, e, eHi)
			expStrs = append(expStrs, es)
			actualStrs = append(actualStrs, as)
			matched = matched && ok
		default:
			expStrs = append(expStrs, "?")
			actualStrs = append(actualStrs, "?")
			matched = false
		}
		pos += width
	}
	if !matched {
		valuesMsg = fmt.Sprintf("\thave [%s]\n\twant [%s]", strings.Join(actualStrs, ", "), strings.Join(expStrs, ", "))
	}
	return matched, valuesMsg
}

// v128Eq compares two v128 values lane by lane and formats both.
func v128Eq(lt laneType, aLo, aHi, eLo, eHi uint64) (expStr, actualStr string, matched bool) {
	var width int
	switch lt {
	case laneTypeI8:
		width = 8
	case laneTypeI16:
		width = 16
	case laneTypeI32, laneTypeF32:
		width = 32
	case laneTypeI64, laneTypeF64:
		width = 64
	default:
		return "v128(unknown lane type " + lt + ")", "?", false
	}
	n := 128 / width
	lane := func(lo, hi uint64, i int) uint64 {
		w := lo
		if i >= n/2 {
			w, i = hi, i-n/2
		}
		if width == 64 {
			return w
		}
		return (w >> (i * width)) & (1<<width - 1)
	}
	format := func(v uint64) string {
		switch lt {
		case laneTypeF32:
			return fmt.Sprintf("%f", math.Float32frombits(uint32(v)))
		case laneTypeF64:
			return fmt.Sprintf("%f", math.Float64frombits(v))
		}
		return fmt.Sprintf("%#x", v)
	}
	matched = true
	es, as := make([]string, n), make([]string, n)
	for i := range n {
		a, e := lane(aLo, aHi, i), lane(eLo, eHi, i)
		es[i], as[i] = format(e), format(a)
		switch lt {
		case laneTypeF32:
			matched = matched && f32Equal(math.Float32frombits(uint32(e)), math.Float32frombits(uint32(a)))
		case laneTypeF64:
			matched = matched && f64Equal(math.Float64frombits(e), math.Float64frombits(a))
		default:
			matched = matched && a == e
		}
	}
	prefix := fmt.Sprintf("%sx%d(", lt, n)
	return prefix + strings.Join(es, ", ") + ")", prefix + strings.Join(as, ", ") + ")", matched
}

// f32Equal compares bit patterns, except that the expected patterns
// f32CanonicalNaNBits and f32ArithmeticNaNBits match any canonical
// (of either sign) or arithmetic NaN respectively, and any other expected NaN
// matches any NaN.
func f32Equal(expected, actual float32) bool {
	eb, ab := math.Float32bits(expected), math.Float32bits(actual)
	switch {
	case eb == f32CanonicalNaNBits:
		return ab&f32CanonicalNaNBitsMask == f32CanonicalNaNBits
	case eb == f32ArithmeticNaNBits:
		return ab&f32ExponentMask == f32ExponentMask && ab&f32ArithmeticNaNPayloadMSB == f32ArithmeticNaNPayloadMSB
	case math.IsNaN(float64(expected)):
		return math.IsNaN(float64(actual))
	default:
		// Bits, not ==: -0 and 0 differ in Wasm.
		return eb == ab
	}
}

// f64Equal is f32Equal for float64.
func f64Equal(expected, actual float64) bool {
	eb, ab := math.Float64bits(expected), math.Float64bits(actual)
	switch {
	case eb == f64CanonicalNaNBits:
		return ab&f64CanonicalNaNBitsMask == f64CanonicalNaNBits
	case eb == f64ArithmeticNaNBits:
		return ab&f64ExponentMask == f64ExponentMask && ab&f64ArithmeticNaNPayloadMSB == f64ArithmeticNaNPayloadMSB
	case math.IsNaN(expected):
		return math.IsNaN(actual)
	default:
		return eb == ab
	}
}

// Tests of the helpers, a subset of wazero's spectest_test.go.

func TestSpecHelpers_floatEqual(t *testing.T) {
	nan32, nan64 := float32(math.NaN()), math.NaN()
	f32 := math.Float32frombits
	f64 := math.Float64frombits
	for i, tc := range []struct {
		e, a float32
		want bool
	}{
		{1.1, 1.1, true},
		{nan32, nan32, true},
		{1.1, -1.1, false},
		{nan32, -1.1, false},
		{-1.1, nan32, false},
		{0, f32(0x8000_0000), false}, // 0 vs -0
		{f32(f32CanonicalNaNBits), f32(f32CanonicalNaNBits), true},
		{f32(f32CanonicalNaNBits), f32(f32CanonicalNaNBits | 1<<31), true},
		{f32(f32CanonicalNaNBits), f32(f32ArithmeticNaNBits), false},
		{f32(f32ArithmeticNaNBits), f32(f32ArithmeticNaNBits | 1<<2), true},
		{f32(f32ArithmeticNaNBits), f32(f32CanonicalNaNBits), true},
		{f32(f32ArithmeticNaNBits), f32(0x7f80_0001), false}, // signalling NaN
	} {
		if got := f32Equal(tc.e, tc.a); got != tc.want {
			t.Errorf("f32 case %d: f32Equal(%#x, %#x) = %v, want %v", i, math.Float32bits(tc.e), math.Float32bits(tc.a), got, tc.want)
		}
	}
	for i, tc := range []struct {
		e, a float64
		want bool
	}{
		{1.1, 1.1, true},
		{nan64, nan64, true},
		{math.Inf(1), math.Inf(-1), false},
		{0, f64(1 << 63), false},
		{f64(f64CanonicalNaNBits), f64(f64CanonicalNaNBits), true},
		{f64(f64CanonicalNaNBits), f64(f64CanonicalNaNBits | 1<<2), false},
		{f64(f64ArithmeticNaNBits), f64(f64ArithmeticNaNBits | 1<<2), true},
		{f64(f64ArithmeticNaNBits), f64(0x7ff0_0000_0000_0001), false},
	} {
		if got := f64Equal(tc.e, tc.a); got != tc.want {
			t.Errorf("f64 case %d: f64Equal(%#x, %#x) = %v, want %v", i, math.Float64bits(tc.e), math.Float64bits(tc.a), got, tc.want)
		}
	}
}

func TestSpecHelpers_toUint64s(t *testing.T) {
	for _, tc := range []struct {
		raw  string
		want []uint64
	}{
		{`{"type": "i32", "value": "4294967295"}`, []uint64{4294967295}},
		{`{"type": "i32", "value": "-1"}`, []uint64{4294967295}},
		{`{"type": "i64", "value": "-1"}`, []uint64{math.MaxUint64}},
		{`{"type": "f32", "value": "2147483648"}`, []uint64{2147483648}},
		{`{"type": "f64", "value": "nan:canonical"}`, []uint64{f64CanonicalNaNBits}},
		{`{"type": "f32", "value": "nan:arithmetic"}`, []uint64{uint64(f32ArithmeticNaNBits)}},
		{`{"type": "externref", "value": "0"}`, []uint64{1}},
		{`{"type": "externref", "value": "null"}`, []uint64{0}},
		{`{"type": "funcref", "value": "null"}`, []uint64{0}},
		{
			`{"type": "v128", "lane_type": "f32", "value": ["nan:canonical", "nan:arithmetic", "nan:canonical", "nan:arithmetic"]}`,
			[]uint64{
				uint64(f32CanonicalNaNBits) | uint64(f32ArithmeticNaNBits)<<32,
				uint64(f32CanonicalNaNBits) | uint64(f32ArithmeticNaNBits)<<32,
			},
		},
		{
			`{"type": "v128", "lane_type": "i8", "value": ["128", "129", "130", "131", "253", "254", "255", "0", "0", "1", "2", "127", "128", "253", "254", "255"]}`,
			[]uint64{
				128 | 129<<8 | 130<<16 | 131<<24 | 253<<32 | 254<<40 | 255<<48,
				1<<8 | 2<<16 | 127<<24 | 128<<32 | 253<<40 | 254<<48 | 255<<56,
			},
		},
		{
			`{"type": "v128", "lane_type": "i16", "value": ["256", "770", "1284", "1798", "2312", "2826", "3340", "3854"]}`,
			[]uint64{256 | 770<<16 | 1284<<32 | 1798<<48, 2312 | 2826<<16 | 3340<<32 | 3854<<48},
		},
		{
			`{"type": "v128", "lane_type": "i64", "value": ["18446744073709551615", "123124"]}`,
			[]uint64{18446744073709551615, 123124},
		},
	} {
		var c commandActionVal
		if err := json.Unmarshal([]byte(tc.raw), &c); err != nil {
			t.Fatal(err)
		}
		got, err := c.toUint64s()
		if err != nil {
			t.Errorf("%s: %v", tc.raw, err)
			continue
		}
		if fmt.Sprint(got) != fmt.Sprint(tc.want) {
			t.Errorf("%s: got %v, want %v", tc.raw, got, tc.want)
		}
	}
}

func TestSpecHelpers_valuesEq(t *testing.T) {
	i32, f64, v128 := api.ValueTypeI32, api.ValueTypeF64, valueTypeV128
	for _, tc := range []struct {
		name        string
		exps, have  []uint64
		types       []api.ValueType
		lanes       map[int]laneType
		wantMatched bool
		wantMsg     string
	}{
		{name: "i32", exps: []uint64{1}, have: []uint64{1 | 1<<32}, types: []api.ValueType{i32}, wantMatched: true},
		{
			name: "i32 mismatch", exps: []uint64{1}, have: []uint64{0}, types: []api.ValueType{i32},
			wantMsg: "\thave [0]\n\twant [1]",
		},
		{
			name:  "i8x16 mismatch",
			exps:  []uint64{0, 0xff<<56 | 0xaa},
			have:  []uint64{math.MaxUint64, 0xff<<48 | 0xcc},
			types: []api.ValueType{v128}, lanes: map[int]laneType{0: laneTypeI8},
			wantMsg: "\thave [i8x16(0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xcc, 0x0, 0x0, 0x0, 0x0, 0x0, 0xff, 0x0)]\n" +
				"\twant [i8x16(0x0, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0, 0xaa, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0, 0xff)]",
		},
		{
			name:  "[i32,f64x2] mismatch",
			exps:  []uint64{123, math.Float64bits(math.Inf(1)), math.Float64bits(math.NaN())},
			have:  []uint64{123, math.Float64bits(math.Inf(-1)), math.Float64bits(math.NaN())},
			types: []api.ValueType{i32, v128}, lanes: map[int]laneType{1: laneTypeF64},
			wantMsg: "\thave [123, f64x2(-Inf, NaN)]\n\twant [123, f64x2(+Inf, NaN)]",
		},
		{
			name: "f64 canonical NaN", exps: []uint64{f64CanonicalNaNBits}, have: []uint64{f64CanonicalNaNBits | 1<<63},
			types: []api.ValueType{f64}, wantMatched: true,
		},
	} {
		matched, msg := valuesEq(tc.have, tc.exps, tc.types, tc.lanes, nil)
		if matched != tc.wantMatched || msg != tc.wantMsg {
			t.Errorf("%s: got (%v, %q), want (%v, %q)", tc.name, matched, msg, tc.wantMatched, tc.wantMsg)
		}
	}
}
