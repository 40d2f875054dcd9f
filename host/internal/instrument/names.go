package instrument

import "fmt"

// Name section subsection IDs keyed by function index.
const (
	nameFunctions = 1 // name map: func index -> name
	nameLocals    = 2 // indirect name map: func index -> (local index -> name)
	nameLabels    = 3 // indirect name map: func index -> (label index -> name)
)

// rewriteNames remaps the function-keyed subsections of a name section and
// copies the others unchanged.
func (m *module) rewriteNames(r *reader) ([]byte, error) {
	var out []byte
	for !r.done() {
		id, err := r.byte("name subsection id")
		if err != nil {
			return nil, err
		}
		size, err := r.u32("name subsection size")
		if err != nil {
			return nil, err
		}
		body, err := r.bytes(int(size), "name subsection")
		if err != nil {
			return nil, err
		}
		switch id {
		case nameFunctions:
			body, err = m.remapNameMap(body, false)
		case nameLocals, nameLabels:
			body, err = m.remapNameMap(body, true)
		}
		if err != nil {
			return nil, err
		}
		out = append(out, id)
		out = appendU32(out, uint32(len(body)))
		out = append(out, body...)
	}
	return out, nil
}

// remapNameMap remaps the outer (function) indices of a name map or, when
// indirect, of an indirect name map.
func (m *module) remapNameMap(p []byte, indirect bool) ([]byte, error) {
	r := newReader(p)
	n, err := r.u32("name map count")
	if err != nil {
		return nil, err
	}
	out := appendU32(nil, n)
	for i := uint32(0); i < n; i++ {
		idx, err := r.u32("function index")
		if err != nil {
			return nil, err
		}
		out = appendU32(out, m.remapFunc(idx))
		start := r.pos()
		if indirect {
			k, err := r.u32("inner name map count")
			if err != nil {
				return nil, err
			}
			for j := uint32(0); j < k; j++ {
				if _, err := r.u32("inner index"); err != nil {
					return nil, err
				}
				if _, err := r.name("name"); err != nil {
					return nil, err
				}
			}
		} else if _, err := r.name("function name"); err != nil {
			return nil, err
		}
		out = append(out, p[start:r.pos()]...)
	}
	if !r.done() {
		return nil, fmt.Errorf("%d trailing bytes in name map", len(p)-r.pos())
	}
	return out, nil
}
