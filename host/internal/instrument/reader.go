package instrument

import (
	"bytes"
	"fmt"
	"io"

	"github.com/tetratelabs/wabin/leb128"
)

// reader decodes the primitive encodings of the wasm binary format. Integer
// encodings come from wabin's leb128 package; reader adds positions and
// errors that name what was being read.
type reader struct {
	buf []byte
	r   *bytes.Reader
}

func newReader(b []byte) *reader { return &reader{buf: b, r: bytes.NewReader(b)} }

func (r *reader) pos() int   { return int(r.r.Size()) - r.r.Len() }
func (r *reader) done() bool { return r.r.Len() == 0 }

func (r *reader) byte(what string) (byte, error) {
	b, err := r.r.ReadByte()
	if err != nil {
		return 0, fmt.Errorf("reading %s at offset %d: unexpected end", what, r.pos())
	}
	return b, nil
}

func (r *reader) u32(what string) (uint32, error) {
	v, _, err := leb128.DecodeUint32(r.r)
	if err != nil {
		return 0, fmt.Errorf("reading %s at offset %d: %w", what, r.pos(), err)
	}
	return v, nil
}

func (r *reader) s32(what string) error {
	if _, _, err := leb128.DecodeInt32(r.r); err != nil {
		return fmt.Errorf("reading %s at offset %d: %w", what, r.pos(), err)
	}
	return nil
}

func (r *reader) s33(what string) (int64, error) {
	v, _, err := leb128.DecodeInt33AsInt64(r.r)
	if err != nil {
		return 0, fmt.Errorf("reading %s at offset %d: %w", what, r.pos(), err)
	}
	return v, nil
}

func (r *reader) s64(what string) error {
	if _, _, err := leb128.DecodeInt64(r.r); err != nil {
		return fmt.Errorf("reading %s at offset %d: %w", what, r.pos(), err)
	}
	return nil
}

func (r *reader) skip(n int, what string) error {
	if n < 0 || n > r.r.Len() {
		return fmt.Errorf("reading %s at offset %d: %d bytes past the end", what, r.pos(), n-r.r.Len())
	}
	_, err := r.r.Seek(int64(n), io.SeekCurrent)
	return err
}

// bytes returns the next n bytes without copying.
func (r *reader) bytes(n int, what string) ([]byte, error) {
	p := r.pos()
	if err := r.skip(n, what); err != nil {
		return nil, err
	}
	return r.buf[p : p+n], nil
}

// name reads a length-prefixed UTF-8 name.
func (r *reader) name(what string) ([]byte, error) {
	n, err := r.u32(what + " length")
	if err != nil {
		return nil, err
	}
	return r.bytes(int(n), what)
}

func appendU32(b []byte, v uint32) []byte { return append(b, leb128.EncodeUint32(v)...) }
func appendS64(b []byte, v int64) []byte  { return append(b, leb128.EncodeInt64(v)...) }

// skipU32 reads one u32 and returns the offset after it, or 0 on error.
func (r *reader) skipU32() int {
	if _, err := r.u32("u32"); err != nil {
		return 0
	}
	return r.pos()
}
