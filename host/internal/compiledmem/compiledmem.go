// Package compiledmem trims what wazero keeps in memory for a compiled
// module once it is ready to instantiate: it frees the decoded function
// bodies, which only compiling reads, and it backs the machine code with a
// file, so that the kernel pages it in as it runs and may drop it again, as
// it does an executable's text, instead of holding all of it as anonymous
// memory.
//
// wazero offers neither (RATIONALE.md, "Why does the engine reach into
// wazero's compiled module?"), so both reach its unexported fields by name,
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
	cm := reflect.ValueOf(c)
	eng, err := field(cm, "compiledEngine")
	if err != nil {
		return nil, 0, nil, err
	}
	if err := isWazevo(eng); err != nil {
		return nil, 0, nil, err
	}
	mux, err := field(eng, "mux")
	if err != nil {
		return nil, 0, nil, err
	}
	lock, ok := mux.Addr().Interface().(interface {
		Lock()
		Unlock()
	})
	if !ok {
		return nil, 0, nil, fmt.Errorf("wazero's engine.mux is a %s, not a lock", mux.Type())
	}
	mod, err := field(cm, "module")
	if err != nil {
		return nil, 0, nil, err
	}
	id, err := field(mod, "ID")
	if err != nil {
		return nil, 0, nil, err
	}
	modules, err := field(eng, "compiledModules")
	if err != nil {
		return nil, 0, nil, err
	}
	if modules.Kind() != reflect.Map || modules.Type().Key() != id.Type() {
		return nil, 0, nil, fmt.Errorf("wazero's engine.compiledModules is a %s, not a map by module ID", modules.Type())
	}
	lock.Lock()
	fail := func(err error) ([]byte, int, func(), error) {
		lock.Unlock()
		return nil, 0, nil, err
	}
	entry := modules.MapIndex(id)
	if !entry.IsValid() {
		return fail(fmt.Errorf("wazero's engine holds no code for the module"))
	}
	// entry is a pointer, so the fields below it are addressable.
	count, err := field(entry, "refCount")
	if err != nil {
		return fail(err)
	}
	compiled, err := field(entry, "compiledModule")
	if err != nil {
		return fail(err)
	}
	exes, err := field(compiled, "executables")
	if err != nil {
		return fail(err)
	}
	exe, err := field(exes, "executable")
	if err != nil {
		return fail(err)
	}
	if exe.Kind() != reflect.Slice || exe.Type().Elem().Kind() != reflect.Uint8 || !count.CanInt() {
		return fail(fmt.Errorf("wazero's executables.executable is a %s, refCount a %s", exe.Type(), count.Type()))
	}
	if exe.Len() == 0 {
		return fail(fmt.Errorf("the module has no machine code"))
	}
	code = unsafe.Slice((*byte)(exe.UnsafePointer()), exe.Len())
	return code, int(count.Int()), lock.Unlock, nil
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
