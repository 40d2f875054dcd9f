// Package format is a small Printf for guests: fmt's verbs and flags for
// the values a reconcile message holds, without package reflect.
//
// Why: in a Go guest, importing fmt costs about 0.7 MB of WebAssembly
// (fmt and reflect), and encoding/json 1.2 MB more, against 1.85 MB for
// an empty module; the machine code the host keeps per module grows with
// it. A reconcile formats strings, numbers, errors and the JSON tree
// (map[string]any, []any), which a type switch covers. The output is
// fmt's for those types; FuzzSprintf and TestSprintf compare the two.
//
// What it does not do: values of any other type (structs, pointers,
// channels) print as %!v(TYPE), not fmt's {field value} form, because
// walking them needs reflect; %T works for every value.
package format

import (
	"runtime"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Stringer is fmt.Stringer.
type Stringer interface{ String() string }

// Sprintf formats like fmt.Sprintf for the verbs b c d e E f F g G o O q s
// t T U v w x X and %%, with the flags + - # 0 space, width and precision
// (also given as *), for nil, strings, []byte, bool, integers, floats,
// errors, Stringers, and maps and slices of these (map[string]any,
// []any, map[string]string, []string, []map[string]any, []int, ...).
// Argument indexes (%[1]d) are not supported.
func Sprintf(format string, args ...any) string {
	p := printer{args: args}
	p.printf(format)
	return string(p.buf)
}

// Sprint formats like fmt.Sprint: each operand's %v, with a space between
// operands when neither side is a string.
func Sprint(args ...any) string {
	p := printer{}
	for i, a := range args {
		_, isString := a.(string)
		if i > 0 && !isString {
			if _, prevString := args[i-1].(string); !prevString {
				p.buf = append(p.buf, ' ')
			}
		}
		p.value(a, 'v', 0)
	}
	return string(p.buf)
}

// TypeName returns the name of v's dynamic type as fmt's %T writes it
// ("<nil>" for nil), without package reflect: the runtime names the type in
// the error of a failed type assertion.
func TypeName(v any) (name string) {
	if v == nil {
		return "<nil>"
	}
	switch v.(type) { // the common ones without a panic
	case string:
		return "string"
	case bool:
		return "bool"
	case int:
		return "int"
	case int64:
		return "int64"
	case float64:
		return "float64"
	case map[string]any:
		return "map[string]interface {}"
	case []any:
		return "[]interface {}"
	}
	defer func() {
		if te, ok := recover().(*runtime.TypeAssertionError); ok {
			msg := te.Error() // interface conversion: T is not interface { ... }: missing method ...
			msg = strings.TrimPrefix(msg, "interface conversion: ")
			if i := strings.Index(msg, " is not "); i >= 0 {
				name = msg[:i]
				return
			}
		}
		name = "?"
	}()
	_ = v.(interface{ wasmreconcileNeverImplemented() })
	return "?"
}

type flags struct {
	plus, minus, sharp, space, zero bool
	width, prec                     int
	hasWidth, hasPrec               bool
}

type printer struct {
	buf    []byte
	args   []any
	argNum int
	f      flags
}

func (p *printer) printf(format string) {
	end := len(format)
	for i := 0; i < end; {
		lasti := i
		for i < end && format[i] != '%' {
			i++
		}
		if i > lasti {
			p.buf = append(p.buf, format[lasti:i]...)
		}
		if i >= end {
			break
		}
		i++ // skip %
		p.f = flags{}
	flagLoop:
		for ; i < end; i++ {
			switch format[i] {
			case '#':
				p.f.sharp = true
			case '0':
				p.f.zero = true
			case '+':
				p.f.plus = true
			case '-':
				p.f.minus = true
			case ' ':
				p.f.space = true
			default:
				break flagLoop
			}
		}
		// width
		if i < end && format[i] == '*' {
			i++
			p.f.width, p.f.hasWidth = p.intArg()
			if !p.f.hasWidth {
				p.buf = append(p.buf, "%!(BADWIDTH)"...)
			}
			if p.f.width < 0 {
				p.f.width, p.f.minus = -p.f.width, true
			}
		} else {
			p.f.width, p.f.hasWidth, i = parseNum(format, i, end)
		}
		// precision
		if i+1 < end && format[i] == '.' { // as fmt: a final '.' is the verb
			i++
			if i < end && format[i] == '*' {
				i++
				p.f.prec, p.f.hasPrec = p.intArg()
				if p.f.prec < 0 {
					p.f.prec, p.f.hasPrec = 0, false
				}
				if !p.f.hasPrec {
					p.buf = append(p.buf, "%!(BADPREC)"...)
				}
			} else {
				p.f.prec, p.f.hasPrec, i = parseNum(format, i, end)
				if !p.f.hasPrec {
					p.f.prec, p.f.hasPrec = 0, true
				}
			}
		}
		p.f.zero = p.f.zero && !p.f.minus // fmt pads with zeros on the left only
		if i >= end {
			p.buf = append(p.buf, "%!(NOVERB)"...)
			break
		}
		verb, size := rune(format[i]), 1
		if verb >= utf8.RuneSelf {
			verb, size = utf8.DecodeRuneInString(format[i:])
		}
		i += size
		if verb == 'v' || verb == 'w' { // fmt's %+v and %#v name struct fields and Go syntax; the flags mean nothing else here
			p.f.plus, p.f.sharp = false, false
		}
		switch {
		case verb == '%':
			p.buf = append(p.buf, '%')
		case p.argNum >= len(p.args):
			p.openBad(verb)
			p.buf = append(p.buf, "MISSING)"...)
		default:
			arg := p.args[p.argNum]
			p.argNum++
			if verb == 'w' { // as fmt.Errorf formats it
				if _, isErr := arg.(error); !isErr {
					if b, isBytes := arg.([]byte); isBytes {
						p.bytes(b, verb)
					} else {
						p.badVerb(verb, arg)
					}
					continue
				}
				verb = 'v'
			}
			p.value(arg, verb, 0)
		}
	}
	if p.argNum < len(p.args) {
		p.buf = append(p.buf, "%!(EXTRA "...)
		for i, a := range p.args[p.argNum:] {
			if i > 0 {
				p.buf = append(p.buf, ", "...)
			}
			if a == nil {
				p.buf = append(p.buf, "<nil>"...)
				continue
			}
			p.buf = append(p.buf, TypeName(a)...)
			p.buf = append(p.buf, '=')
			p.f = flags{}
			p.value(a, 'v', 0)
		}
		p.buf = append(p.buf, ')')
	}
}

func parseNum(s string, i, end int) (num int, ok bool, next int) {
	for i < end && s[i] >= '0' && s[i] <= '9' {
		if num > 1e6 {
			return 0, false, end // absurd width: fmt reports it; stop here
		}
		num = num*10 + int(s[i]-'0')
		ok = true
		i++
	}
	return num, ok, i
}

func (p *printer) intArg() (int, bool) {
	if p.argNum >= len(p.args) {
		return 0, false
	}
	a := p.args[p.argNum]
	p.argNum++
	switch n := a.(type) {
	case int:
		return n, true
	case int32:
		return int(n), true
	case int64:
		return int(n), true
	case uint:
		return int(n), true
	}
	return 0, false
}

// pad appends s honoring width and the minus flag (zero padding is done
// by the numeric formatters).
func (p *printer) pad(s []byte) {
	after := p.fillBefore(utf8.RuneCount(s))
	p.buf = append(p.buf, s...)
	p.buf = appendRepeat(p.buf, ' ', after)
}

func (p *printer) padString(s string) {
	after := p.fillBefore(utf8.RuneCountInString(s))
	p.buf = append(p.buf, s...)
	p.buf = appendRepeat(p.buf, ' ', after)
}

// fillBefore writes the padding that goes before a value n runes long and
// returns how many spaces go after it (the - flag).
func (p *printer) fillBefore(n int) (after int) {
	if !p.f.hasWidth || n >= p.f.width {
		return 0
	}
	fill := p.f.width - n
	if p.f.minus {
		return fill
	}
	c := byte(' ')
	if p.f.zero {
		c = '0'
	}
	p.buf = appendRepeat(p.buf, c, fill)
	return 0
}

func appendRepeat(b []byte, c byte, n int) []byte {
	for ; n > 0; n-- {
		b = append(b, c)
	}
	return b
}

// openBad writes the start of fmt's bad-verb form, "%!verb(".
func (p *printer) openBad(verb rune) {
	p.buf = append(p.buf, "%!"...)
	p.buf = utf8.AppendRune(p.buf, verb)
	p.buf = append(p.buf, '(')
}

func (p *printer) badVerb(verb rune, arg any) {
	p.openBad(verb)
	if arg == nil {
		p.buf = append(p.buf, "<nil>"...)
	} else {
		p.buf = append(p.buf, TypeName(arg)...)
		p.buf = append(p.buf, '=')
		p.value(arg, 'v', 1)
	}
	p.buf = append(p.buf, ')')
}

// value formats arg for verb. depth counts the containers around it: in
// one, a string is printed bare under %v, as fmt does.
func (p *printer) value(arg any, verb rune, depth int) {
	if verb == 'T' {
		p.str(TypeName(arg), 's', nil)
		return
	}
	if arg == nil {
		switch {
		case depth > 0: // in a container, fmt writes it as is
			p.buf = append(p.buf, "<nil>"...)
		case verb == 'v':
			p.padString("<nil>")
		default:
			p.badVerb(verb, nil)
		}
		return
	}
	// fmt's order: basic types are printed directly, then error, then Stringer.
	switch x := arg.(type) {
	case bool:
		p.boolean(x, verb)
	case string:
		p.str(x, verb, arg)
	case []byte:
		p.bytes(x, verb)
	case float64:
		p.float(x, 64, verb, arg)
	case float32:
		p.float(float64(x), 32, verb, arg)
	case int:
		p.integer(uint64(x), true, verb, arg)
	case int8:
		p.integer(uint64(x), true, verb, arg)
	case int16:
		p.integer(uint64(x), true, verb, arg)
	case int32:
		p.integer(uint64(x), true, verb, arg)
	case int64:
		p.integer(uint64(x), true, verb, arg)
	case uint:
		p.integer(uint64(x), false, verb, arg)
	case uint8:
		p.integer(uint64(x), false, verb, arg)
	case uint16:
		p.integer(uint64(x), false, verb, arg)
	case uint32:
		p.integer(uint64(x), false, verb, arg)
	case uint64:
		p.integer(x, false, verb, arg)
	case uintptr:
		p.integer(uint64(x), false, verb, arg)
	case error:
		p.handled(arg, verb, func() string { return x.Error() })
	case Stringer:
		p.handled(arg, verb, func() string { return x.String() })
	case map[string]any:
		p.mapValues(len(x), sortedKeys(x), func(k string) any { return x[k] }, verb, depth)
	case map[string]string:
		p.mapValues(len(x), sortedKeys(x), func(k string) any { return x[k] }, verb, depth)
	case []any:
		p.list(len(x), func(i int) any { return x[i] }, verb, depth)
	case []string:
		p.list(len(x), func(i int) any { return x[i] }, verb, depth)
	case []map[string]any:
		p.list(len(x), func(i int) any { return x[i] }, verb, depth)
	case []int:
		p.list(len(x), func(i int) any { return x[i] }, verb, depth)
	case []int64:
		p.list(len(x), func(i int) any { return x[i] }, verb, depth)
	case []float64:
		p.list(len(x), func(i int) any { return x[i] }, verb, depth)
	case []error:
		p.list(len(x), func(i int) any { return x[i] }, verb, depth)
	default: // fmt would walk the value with reflect
		p.openBad(verb)
		p.buf = append(p.buf, TypeName(arg)...)
		p.buf = append(p.buf, ')')
	}
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// handled formats an error's or a Stringer's text for the verbs fmt calls
// the method for; others see the value as fmt would without the method
// (which needs reflect: reported as a bad verb).
func (p *printer) handled(arg any, verb rune, text func() string) {
	switch verb {
	case 'v', 's', 'x', 'X', 'q':
		var s string
		func() {
			defer func() {
				if r := recover(); r != nil {
					s = "%!" + string(verb) + "(PANIC=" + methodName(arg) + " method: " + Sprint(r) + ")"
				}
			}()
			s = text()
		}()
		p.str(s, verb, s)
	default: // fmt prints the fields, which takes reflect: the text, unformatted
		p.openBad(verb)
		p.buf = append(p.buf, TypeName(arg)...)
		p.buf = append(p.buf, '=')
		p.buf = append(p.buf, text()...)
		p.buf = append(p.buf, ')')
	}
}

func methodName(arg any) string {
	if _, ok := arg.(error); ok {
		return "Error"
	}
	return "String"
}

func (p *printer) mapValues(n int, keys []string, get func(string) any, verb rune, depth int) {
	p.buf = append(p.buf, "map["...)
	saved := p.f
	for i, k := range keys {
		if i > 0 {
			p.buf = append(p.buf, ' ')
		}
		p.f = saved
		p.value(k, verb, depth+1)
		p.buf = append(p.buf, ':')
		p.f = saved
		p.value(get(k), verb, depth+1)
	}
	p.f = saved
	p.buf = append(p.buf, ']')
}

func (p *printer) list(n int, get func(int) any, verb rune, depth int) {
	p.buf = append(p.buf, '[')
	saved := p.f
	for i := 0; i < n; i++ {
		if i > 0 {
			p.buf = append(p.buf, ' ')
		}
		p.f = saved
		p.value(get(i), verb, depth+1)
	}
	p.f = saved
	p.buf = append(p.buf, ']')
}

func (p *printer) boolean(v bool, verb rune) {
	switch verb {
	case 't', 'v':
		p.padString(strconv.FormatBool(v))
	default:
		p.badVerb(verb, v)
	}
}

func (p *printer) str(s string, verb rune, arg any) {
	switch verb {
	case 'v', 's':
		if p.f.hasPrec {
			s = truncate(s, p.f.prec)
		}
		p.padString(s)
	case 'q':
		if p.f.hasPrec {
			s = truncate(s, p.f.prec)
		}
		if p.f.sharp && strconv.CanBackquote(s) {
			p.padString("`" + s + "`")
		} else if p.f.plus {
			p.padString(strconv.QuoteToASCII(s))
		} else {
			p.padString(strconv.Quote(s))
		}
	case 'x', 'X':
		p.hexString(s, verb)
	default:
		p.badVerb(verb, arg)
	}
}

func truncate(s string, n int) string {
	for i := range s {
		if n == 0 {
			return s[:i]
		}
		n--
	}
	return s
}

func (p *printer) hexString(s string, verb rune) {
	digits := "0123456789abcdef"
	if verb == 'X' {
		digits = "0123456789ABCDEF"
	}
	if p.f.hasPrec && p.f.prec < len(s) {
		s = s[:p.f.prec]
	}
	var out []byte
	for i := 0; i < len(s); i++ {
		if p.f.space && i > 0 {
			out = append(out, ' ')
		}
		if p.f.sharp && (p.f.space || i == 0) {
			out = append(out, '0', byte(verb))
		}
		out = append(out, digits[s[i]>>4], digits[s[i]&0xF])
	}
	p.pad(out)
}

func (p *printer) bytes(b []byte, verb rune) {
	switch verb {
	case 's', 'q', 'x', 'X':
		p.str(string(b), verb, b)
	default:
		p.list(len(b), func(i int) any { return b[i] }, verb, 1)
	}
}

func (p *printer) integer(u uint64, signed bool, verb rune, arg any) {
	base := 10
	switch verb {
	case 'v', 'd':
	case 'b':
		base = 2
	case 'o', 'O':
		base = 8
	case 'x', 'X':
		base = 16
	case 'c':
		p.padString(string(toRune(u, signed)))
		return
	case 'q':
		if p.f.plus {
			p.padString(strconv.QuoteRuneToASCII(toRune(u, signed)))
		} else {
			p.padString(strconv.QuoteRune(toRune(u, signed)))
		}
		return
	case 'U': // fmt's fmtUnicode
		s := strings.ToUpper(strconv.FormatUint(u, 16))
		prec := 4
		if p.f.hasPrec && p.f.prec > 4 {
			prec = p.f.prec
		}
		if len(s) < prec {
			s = strings.Repeat("0", prec-len(s)) + s
		}
		s = "U+" + s
		if p.f.sharp && u <= utf8.MaxRune && strconv.IsPrint(rune(u)) {
			s += " '" + string(rune(u)) + "'"
		}
		saved := p.f.zero
		p.f.zero = false
		p.padString(s)
		p.f.zero = saved
		return
	default:
		p.badVerb(verb, arg)
		return
	}
	// fmt's fmtInteger: %.3d and %03d both ask for leading zero digits;
	// the sign and the prefix come on top of them.
	negative := signed && int64(u) < 0
	if negative {
		u = -u
	}
	prec := 0
	if p.f.hasPrec {
		prec = p.f.prec
		if prec == 0 && u == 0 { // nothing but the padding
			saved := p.f.zero
			p.f.zero = false
			p.pad(nil)
			p.f.zero = saved
			return
		}
	} else if p.f.zero && p.f.hasWidth {
		prec = p.f.width
		if negative || p.f.plus || p.f.space {
			prec-- // leave room for the sign
		}
	}
	digits := strconv.AppendUint(nil, u, base)
	if verb == 'X' {
		digits = []byte(strings.ToUpper(string(digits)))
	}
	var head []byte
	for n := len(digits); n < prec; n++ {
		head = append(head, '0')
	}
	digits = append(head, digits...)
	prefix := ""
	if p.f.sharp {
		switch base {
		case 2:
			prefix = "0b"
		case 8:
			if digits[0] != '0' {
				prefix = "0"
			}
		case 16:
			prefix = "0" + string(verb)
		}
	}
	if verb == 'O' {
		prefix = "0o"
	}
	sign := ""
	switch {
	case negative:
		sign = "-"
	case p.f.plus:
		sign = "+"
	case p.f.space:
		sign = " "
	}
	saved := p.f.zero
	p.f.zero = false
	p.pad(append([]byte(sign+prefix), digits...))
	p.f.zero = saved
}

// toRune is fmt's rune for an integer: utf8.RuneError past the range.
func toRune(u uint64, signed bool) rune {
	if (signed && int64(u) < 0) || u > utf8.MaxRune {
		return utf8.RuneError
	}
	return rune(u)
}

func (p *printer) float(v float64, size int, verb rune, arg any) {
	prec := -1
	switch verb {
	case 'v':
		verb = 'g'
	case 'b', 'g', 'G', 'x', 'X':
	case 'e', 'E', 'f':
		prec = 6
	case 'F':
		verb, prec = 'f', 6
	default:
		p.badVerb(verb, arg)
		return
	}
	if p.f.hasPrec {
		prec = p.f.prec
	}
	// As fmt: reserve room for a sign, then decide what to show.
	num := strconv.AppendFloat([]byte{0}, v, byte(verb), prec, size)
	if num[1] == '-' || num[1] == '+' {
		num = num[1:]
	} else {
		num[0] = '+'
	}
	if p.f.space && num[0] == '+' && !p.f.plus {
		num[0] = ' '
	}
	if num[1] == 'I' || num[1] == 'N' { // Inf and NaN are not zero padded
		if num[1] == 'N' && !p.f.space && !p.f.plus {
			num = num[1:]
		}
		saved := p.f.zero
		p.f.zero = false
		p.pad(num)
		p.f.zero = saved
		return
	}
	if p.f.plus || num[0] != '+' {
		if p.f.zero && p.f.hasWidth && p.f.width > len(num) {
			p.buf = append(p.buf, num[0])
			p.buf = appendRepeat(p.buf, '0', p.f.width-len(num))
			p.buf = append(p.buf, num[1:]...)
			return
		}
		p.pad(num)
		return
	}
	p.pad(num[1:])
}
