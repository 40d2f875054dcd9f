package guest

import "github.com/wasmreconcile/wasmreconcile/guest-sdk/internal/format"

// Sprintf formats like fmt.Sprintf, without fmt: a module that imports
// fmt grows by about 0.7 MB of WebAssembly (encoding/json by 1.2 MB more),
// and the host keeps machine code in proportion for every loaded module.
// Use it for conditions, Events and errors; Errorf and the log functions
// format with it.
//
// It has fmt's verbs (%v %s %d %q %x %X %f %g %e %t %c %U %b %o %T %w and
// %%), flags, width and precision, with fmt's output, for nil, strings,
// []byte, booleans, integers, floats, errors, Stringers, and the maps and
// slices a request's objects are made of (map[string]any, []any,
// map[string]string, []string, ...). It does not walk other values,
// which takes reflect: a struct or a pointer prints as %!v(main.T) (%T
// names any type), %#v is %v, and argument indexes (%[1]d) are not
// supported. A module that needs them can import fmt and pay for it.
func Sprintf(f string, args ...any) string { return format.Sprintf(f, args...) }

// Sprint formats like fmt.Sprint, with Sprintf's types.
func Sprint(args ...any) string { return format.Sprint(args...) }
