package compiledmem

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"reflect"
	"sort"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/tetratelabs/wazero"

	"github.com/wasmreconcile/wasmreconcile/host/internal/dirquota"
)

// MappedCode is the file cache of a wazero compilation cache (ServeMappedCode)
// that hands wazero a cached module without its machine code when the code is
// already in a file MapCode wrote, so that Attach maps that file instead.
//
// A module coming back from the compilation cache (a wake from unload, a
// reload) otherwise costs wazero a fresh anonymous mapping as large as its
// code, filled by reading the cache entry and checked by CRC, which MapCode
// then reads again to compare with its file and maps that file over: 9 MiB
// of a Go guest's code read twice and faulted into memory only to be thrown
// away. Page faults are the most of it (about 2,400 for a Go guest; 11 µs
// each on a virtual machine measured here).
//
// The entry served keeps all else wazero reads (function offsets, the catch
// clause table); only the code's length is zero. Before serving it, Get
// checks the code file against the entry, length and CRC-32C, as wazero
// checks its own entry, and maps it: a file that is missing, stale, corrupt
// or not mappable (a file system mounted noexec) makes Get serve the whole
// entry, as wazero wrote it. What could still fail after wazero took the
// entry is only Attach's reach into wazero's engine, which the package's
// tests catch on an upgrade; a caller whose Attach fails must close the
// compiled module, call Disable and compile again.
type MappedCode struct {
	inner fileCache
	dir   string
	known func() ([sha256.Size]byte, bool)

	disabled    atomic.Bool
	requireHits atomic.Bool
	served      atomic.Int64 // entries served without their code

	mu      sync.Mutex
	pending [][]byte // code mapped by Get and not yet attached
}

// fileCache is wazero's internal filecache.Cache (its Key is an alias of
// [sha256.Size]byte).
type fileCache interface {
	Get(key [sha256.Size]byte) (content io.ReadCloser, ok bool, err error)
	Add(key [sha256.Size]byte, content io.Reader) (err error)
	Delete(key [sha256.Size]byte) (err error)
}

// ServeMappedCode installs a MappedCode as the file cache of c, which must
// have been made by wazero.NewCompilationCacheWithDir and not yet been given
// to a runtime (its engine reads the file cache when the first runtime
// starts). dir is the directory MapCode writes code to; known returns the
// sha256 of the machine code of the module compiled through c, once MapCode
// has returned it (false until then): the compilation caches of this
// package's callers each hold one module's code.
//
// It returns an error and changes nothing when c is not such a cache.
func ServeMappedCode(c wazero.CompilationCache, dir string, known func() ([sha256.Size]byte, bool)) (*MappedCode, error) {
	v := reflect.ValueOf(c)
	fc, err := field(v, "fileCache")
	if err != nil {
		return nil, err
	}
	engs, err := field(v, "engs")
	if err != nil {
		return nil, err
	}
	if engs.Kind() != reflect.Array {
		return nil, fmt.Errorf("wazero's cache.engs is a %s, not an array", engs.Type())
	}
	for i := range engs.Len() {
		if !engs.Index(i).IsNil() {
			return nil, errors.New("the compilation cache is in use by a runtime already")
		}
	}
	if fc.Kind() != reflect.Interface || fc.IsNil() {
		return nil, errors.New("the compilation cache has no directory")
	}
	inner, ok := fc.Interface().(fileCache)
	if !ok {
		return nil, fmt.Errorf("wazero's file cache %s does not have the methods expected", fc.Elem().Type())
	}
	m := &MappedCode{inner: inner, dir: dir, known: known}
	if !reflect.TypeOf(m).AssignableTo(fc.Type()) {
		return nil, fmt.Errorf("wazero's %s has other methods than expected", fc.Type())
	}
	fc.Set(reflect.ValueOf(m))
	return m, nil
}

// Disable makes Get serve every entry whole from now on.
func (m *MappedCode) Disable() { m.disabled.Store(true) }

// ErrNotCached is what CompileModule returns, through a cache whose
// MappedCode requires hits, for a module the cache does not hold.
var ErrNotCached = errors.New("the module is not in the compilation cache")

// RequireHits makes Get fail a miss with ErrNotCached, so that wazero
// returns it from CompileModule instead of compiling the module in this
// process: for a host whose compiles run in a worker, which puts what it
// compiled in the cache.
func (m *MappedCode) RequireHits() { m.requireHits.Store(true) }

// Served is the number of entries served without their code.
func (m *MappedCode) Served() int64 { return m.served.Load() }

// Add implements wazero's file cache.
func (m *MappedCode) Add(key [sha256.Size]byte, content io.Reader) error {
	return m.inner.Add(key, content)
}

// Delete implements wazero's file cache.
func (m *MappedCode) Delete(key [sha256.Size]byte) error { return m.inner.Delete(key) }

// Get implements wazero's file cache: the entry without its code, mapped
// for Attach, when the code file matches it; otherwise the whole entry.
func (m *MappedCode) Get(key [sha256.Size]byte) (io.ReadCloser, bool, error) {
	rc, ok, err := m.inner.Get(key)
	if err == nil && !ok {
		return m.miss()
	}
	if f, isFile := rc.(*os.File); ok && isFile {
		dirquota.Touch(f.Name()) // used: a bounded cache directory keeps it longest
	}
	if !ok || err != nil || m.disabled.Load() {
		return rc, ok, err
	}
	sum, known := m.known()
	if !known {
		return rc, ok, err
	}
	f, isFile := rc.(*os.File)
	if !isFile {
		return rc, ok, err
	}
	entry, code, err := m.stub(f, sum)
	if err != nil {
		// Serve what wazero wrote; MapCode fixes the file after.
		if _, err := f.Seek(0, io.SeekStart); err != nil {
			_ = f.Close()
			return m.miss()
		}
		return f, true, nil
	}
	_ = f.Close()
	m.mu.Lock()
	m.pending = append(m.pending, code)
	m.mu.Unlock()
	m.served.Add(1)
	return io.NopCloser(bytes.NewReader(entry)), true, nil
}

// miss is Get's answer for a module the cache does not hold.
func (m *MappedCode) miss() (io.ReadCloser, bool, error) {
	if m.requireHits.Load() {
		return nil, false, ErrNotCached
	}
	return nil, false, nil
}

// stub reads wazero's entry f (wazevo's engine_cache.go: "WAZEVO", a byte
// of version length, the version, a u32 function count, a u64 offset per
// function, a u64 code length, the code, its u32 CRC-32C, then a byte that
// says whether a source map follows, and the rest), checks the code file
// named by sum against it and maps it, and returns the entry with a code
// length of zero and neither code nor CRC, and the mapping.
func (m *MappedCode) stub(f *os.File, sum [sha256.Size]byte) (entry, code []byte, err error) {
	fi, err := f.Stat()
	if err != nil {
		return nil, nil, err
	}
	var head [7]byte
	if _, err := f.ReadAt(head[:], 0); err != nil {
		return nil, nil, err
	}
	if string(head[:6]) != "WAZEVO" {
		return nil, nil, fmt.Errorf("a wazero cache entry starts %q", head[:6])
	}
	countAt := int64(7) + int64(head[6])
	var four [4]byte
	if _, err := f.ReadAt(four[:], countAt); err != nil {
		return nil, nil, err
	}
	lengthAt := countAt + 4 + 8*int64(binary.LittleEndian.Uint32(four[:]))
	if lengthAt+8 > fi.Size() {
		return nil, nil, errors.New("a truncated wazero cache entry")
	}
	prefix := make([]byte, lengthAt+8)
	if _, err := f.ReadAt(prefix, 0); err != nil {
		return nil, nil, err
	}
	codeLen := binary.LittleEndian.Uint64(prefix[lengthAt:])
	tailAt := lengthAt + 8 + int64(codeLen) + 4
	if codeLen == 0 || codeLen > uint64(fi.Size()) || tailAt >= fi.Size() {
		return nil, nil, errors.New("a wazero cache entry with no code or truncated")
	}
	tail := make([]byte, fi.Size()-tailAt)
	if _, err := f.ReadAt(tail, tailAt); err != nil {
		return nil, nil, err
	}
	if tail[0] != 0 {
		return nil, nil, errors.New("the entry has a source map, whose addresses wazero computes from the code it read")
	}
	if _, err := f.ReadAt(four[:], tailAt-4); err != nil {
		return nil, nil, err
	}
	code, err = mapChecked(codePath(m.dir, sum), int(codeLen), binary.LittleEndian.Uint32(four[:]))
	if err != nil {
		return nil, nil, err
	}
	clear(prefix[lengthAt:]) // a code length of zero
	return append(prefix, tail...), code, nil
}

// mapChecked maps the file at path, read-only and executable, if it holds
// size bytes whose CRC-32C is crc. It reads the file to check it rather
// than the mapping, so that only the pages of code that run become
// resident.
func mapChecked(path string, size int, crc uint32) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil || fi.Size() != int64(size) {
		return nil, fmt.Errorf("%s is not the machine code of the cache entry", path)
	}
	buf := make([]byte, min(size, 256<<10))
	var got uint32
	for off := 0; off < size; {
		n, err := f.ReadAt(buf[:min(len(buf), size-off)], int64(off))
		got = crc32.Update(got, castagnoli, buf[:n])
		off += n
		if err != nil && (err != io.EOF || off < size) {
			return nil, err
		}
	}
	if got != crc {
		return nil, fmt.Errorf("%s does not hold the machine code of the cache entry", path)
	}
	dirquota.Touch(path) // used: a bounded cache directory keeps it longest
	return mapFile(f, size)
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Attach gives c, compiled through the cache m serves, the code Get mapped
// when it served c's entry without it, and returns whether it did. When c
// has its code already (wazero read the whole entry, or another compiled
// module of the same bytes got it first) it returns false and unmaps what
// it took. It returns an error when c is left without code: c must then
// not be instantiated (its calls would jump to nowhere); close it, Disable
// m and compile again.
//
// Call it once after CompileModule, before c is instantiated or shared.
func (m *MappedCode) Attach(c wazero.CompiledModule) (bool, error) {
	m.mu.Lock()
	var code []byte
	if n := len(m.pending); n > 0 {
		code, m.pending = m.pending[n-1], m.pending[:n-1]
	}
	m.mu.Unlock()
	e, err := entryOf(c)
	if err != nil {
		unmap(code)
		return false, err
	}
	defer e.unlock()
	if e.exe.Len() > 0 {
		unmap(code)
		return false, nil
	}
	if code == nil {
		return false, errors.New("the compiled module has no machine code and none was mapped for it")
	}
	if err := e.insertSorted(code); err != nil {
		unmap(code)
		return false, err
	}
	e.exe.Set(reflect.ValueOf(code))
	return true, nil
}

// Close unmaps the code Get mapped that no Attach took.
func (m *MappedCode) Close() {
	m.mu.Lock()
	pending := m.pending
	m.pending = nil
	m.mu.Unlock()
	for _, code := range pending {
		unmap(code)
	}
}

// engineEntry is a compiled module's entry in wazero's engine, reached under
// the engine's lock (held until unlock).
type engineEntry struct {
	eng      reflect.Value // *wazevo.engine
	compiled reflect.Value // *wazevo.compiledModule
	exe      reflect.Value // its executables.executable
	refs     int
	unlock   func()
}

// entryOf finds the engine's entry of c, compiled by the optimizing
// compiler, and returns it with the engine locked.
func entryOf(c wazero.CompiledModule) (*engineEntry, error) {
	cm := reflect.ValueOf(c)
	eng, err := field(cm, "compiledEngine")
	if err != nil {
		return nil, err
	}
	if err := isWazevo(eng); err != nil {
		return nil, err
	}
	mux, err := field(eng, "mux")
	if err != nil {
		return nil, err
	}
	lock, ok := mux.Addr().Interface().(interface {
		Lock()
		Unlock()
	})
	if !ok {
		return nil, fmt.Errorf("wazero's engine.mux is a %s, not a lock", mux.Type())
	}
	mod, err := field(cm, "module")
	if err != nil {
		return nil, err
	}
	id, err := field(mod, "ID")
	if err != nil {
		return nil, err
	}
	modules, err := field(eng, "compiledModules")
	if err != nil {
		return nil, err
	}
	if modules.Kind() != reflect.Map || modules.Type().Key() != id.Type() {
		return nil, fmt.Errorf("wazero's engine.compiledModules is a %s, not a map by module ID", modules.Type())
	}
	lock.Lock()
	fail := func(err error) (*engineEntry, error) {
		lock.Unlock()
		return nil, err
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
	exe, err := executableOf(compiled)
	if err != nil {
		return fail(err)
	}
	if !count.CanInt() {
		return fail(fmt.Errorf("wazero's refCount is a %s", count.Type()))
	}
	e := eng
	for e.Kind() == reflect.Interface {
		e = e.Elem()
	}
	return &engineEntry{eng: e, compiled: compiled, exe: exe, refs: int(count.Int()), unlock: lock.Unlock}, nil
}

// executableOf returns the field executables.executable of compiled, a
// *wazevo.compiledModule, as a settable byte slice.
func executableOf(compiled reflect.Value) (reflect.Value, error) {
	exes, err := field(compiled, "executables")
	if err != nil {
		return reflect.Value{}, err
	}
	exe, err := field(exes, "executable")
	if err != nil {
		return reflect.Value{}, err
	}
	if exe.Kind() != reflect.Slice || exe.Type().Elem().Kind() != reflect.Uint8 {
		return reflect.Value{}, fmt.Errorf("wazero's executables.executable is a %s", exe.Type())
	}
	return exe, nil
}

// insertSorted adds the entry's compiled module to the engine's list of
// compiled modules sorted by the address of their code, as wazero does for
// code it read or compiled itself (it finds the module of a return address
// there when it unwinds a guest's stack), as if its code were code.
func (e *engineEntry) insertSorted(code []byte) error {
	sorted, err := field(e.eng, "sortedCompiledModules")
	if err != nil {
		return err
	}
	if sorted.Kind() != reflect.Slice || sorted.Type().Elem() != e.compiled.Type() {
		return fmt.Errorf("wazero's engine.sortedCompiledModules is a %s", sorted.Type())
	}
	addr := uintptr(unsafe.Pointer(unsafe.SliceData(code)))
	var failed error
	i := sort.Search(sorted.Len(), func(i int) bool {
		exe, err := executableOf(sorted.Index(i))
		if err != nil || exe.Len() == 0 {
			failed = fmt.Errorf("wazero's sorted list holds a module without code: %v", err)
			return true
		}
		return uintptr(exe.UnsafePointer()) >= addr
	})
	if failed != nil {
		return failed
	}
	n := sorted.Len()
	grown := reflect.Append(sorted, reflect.Zero(sorted.Type().Elem()))
	reflect.Copy(grown.Slice(i+1, n+1), grown.Slice(i, n))
	grown.Index(i).Set(e.compiled)
	sorted.Set(grown)
	return nil
}
