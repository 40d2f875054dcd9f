// Package compiledmem trims what wazero keeps in memory for a compiled
// module once it is ready to instantiate: it frees the decoded function
// bodies, which only compiling reads, and it backs the machine code with a
// file, so that the kernel pages it in as it runs and may drop it again, as
// it does an executable's text, instead of holding all of it as anonymous
// memory. A module compiled again from wazero's compilation cache gets its
// code from that file directly (MappedCode), instead of a copy read into
// fresh memory first.
//
// wazero offers none of these (RATIONALE.md, "Why does the engine reach into
// wazero's compiled module?"), so all reach its unexported fields by name,
// for the wazero version in go.mod and its optimizing compiler only. When a
// field is not where it is expected, or the module was not compiled by that
// compiler, they change nothing and say why in their error: the module keeps
// running as wazero left it, and the package's tests fail, which is how an
// upgrade of wazero is caught.
package compiledmem

import (
	"fmt"
	"reflect"
	"unsafe"

	"github.com/tetratelabs/wazero"
)

// wazevoEngine is the package path and type name of wazero's optimizing
// compiler's engine: the only engine whose code does not read the function
// bodies after compiling and whose machine code is in memory it mapped.
const (
	wazevoPackage = "github.com/tetratelabs/wazero/internal/engine/wazevo"
	wazevoEngine  = "engine"
)

// ReleaseBodies frees the function bodies of c's decoded module: after
// wazero's optimizing compiler compiled them (or read their code from the
// compilation cache), nothing reads them again, and they are about the size
// of the module's code section. It returns the number of bytes it let go.
//
// Call it once c is compiled and before c is used from another goroutine.
// c stays usable for instantiation; it must not be handed to anything that
// compiles or validates it again. It returns an error and changes nothing
// when c was not compiled by the optimizing compiler (the interpreter lowers
// the bodies when a function is first called).
func ReleaseBodies(c wazero.CompiledModule) (int, error) {
	cm := reflect.ValueOf(c)
	eng, err := field(cm, "compiledEngine")
	if err != nil {
		return 0, err
	}
	if err := isWazevo(eng); err != nil {
		return 0, err
	}
	mod, err := field(cm, "module")
	if err != nil {
		return 0, err
	}
	code, err := field(mod, "CodeSection")
	if err != nil {
		return 0, err
	}
	if code.Kind() != reflect.Slice {
		return 0, fmt.Errorf("wazero's Module.CodeSection is a %s, not a slice", code.Kind())
	}
	freed := 0
	for i := range code.Len() {
		body, err := field(code.Index(i), "Body")
		if err != nil {
			return freed, err
		}
		if body.Kind() != reflect.Slice || body.Type().Elem().Kind() != reflect.Uint8 {
			return freed, fmt.Errorf("wazero's Code.Body is a %s, not a byte slice", body.Type())
		}
		freed += body.Cap()
		body.SetZero()
	}
	return freed, nil
}

// executable returns the machine code of c, compiled by the optimizing
// compiler, and the number of compiled modules sharing it (identical bytes
// loaded into one engine share code). The caller must hold the engine's
// lock, which unlock releases.
func executable(c wazero.CompiledModule) (code []byte, refs int, unlock func(), err error) {
	e, err := entryOf(c)
	if err != nil {
		return nil, 0, nil, err
	}
	if e.exe.Len() == 0 {
		e.unlock()
		return nil, 0, nil, fmt.Errorf("the module has no machine code")
	}
	code = unsafe.Slice((*byte)(e.exe.UnsafePointer()), e.exe.Len())
	return code, e.refs, e.unlock, nil
}

// isWazevo checks that eng, a wasm.Engine, is the optimizing compiler's.
func isWazevo(eng reflect.Value) error {
	if eng.Kind() == reflect.Interface {
		eng = eng.Elem()
	}
	t := eng.Type()
	if t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.PkgPath() != wazevoPackage || t.Name() != wazevoEngine {
		return fmt.Errorf("the module was compiled by %s.%s, not by wazero's optimizing compiler", t.PkgPath(), t.Name())
	}
	return nil
}

// field returns the field name of the struct v is, or points to, as a
// settable value, whether or not the field is exported. v must be a pointer
// or an addressable struct (a field reached through a pointer is).
func field(v reflect.Value, name string) (reflect.Value, error) {
	for v.Kind() == reflect.Interface || v.Kind() == reflect.Pointer {
		if v.IsNil() {
			return reflect.Value{}, fmt.Errorf("wazero's %s is nil where its field %s was expected", v.Type(), name)
		}
		v = v.Elem()
	}
	if v.Kind() != reflect.Struct || !v.CanAddr() {
		return reflect.Value{}, fmt.Errorf("wazero's %s is not an addressable struct with a field %s", v.Type(), name)
	}
	f := v.FieldByName(name)
	if !f.IsValid() {
		return reflect.Value{}, fmt.Errorf("wazero's %s has no field %s (was wazero upgraded? see package compiledmem)", v.Type(), name)
	}
	return reflect.NewAt(f.Type(), unsafe.Pointer(f.UnsafeAddr())).Elem(), nil
}
