package guest

import (
	"errors"
	"strconv"

	"github.com/wasmreconcile/wasmreconcile/guest-sdk/abi"
	"github.com/wasmreconcile/wasmreconcile/guest-sdk/internal/jsontree"
)

// ErrForbidden is returned by Get and List for a kind the manifest does not
// declare in For, Owns or Reads.
var ErrForbidden = errors.New("kind not declared in the manifest")

// CacheError is a failed cache read.
type CacheError struct {
	Status  abi.CacheStatus
	Message string
}

func (e *CacheError) Error() string {
	return "cache read: " + e.Message + " (status " + strconv.FormatUint(uint64(e.Status), 10) + ")"
}

// Is makes errors.Is(err, ErrForbidden) work.
func (e *CacheError) Is(target error) bool {
	return target == ErrForbidden && e.Status == abi.CacheForbidden
}

// Get reads one object from the host's cache. found is false when the
// object does not exist. The kind must be declared in the manifest.
func Get(apiVersion, kind, namespace, name string) (obj Object, found bool, err error) {
	status, out := cacheRead(abi.CacheRequest{Op: "get", APIVersion: apiVersion, Kind: kind, Namespace: namespace, Name: name})
	switch status {
	case abi.CacheOK:
		v, err := jsontree.Decode(out)
		if err != nil {
			return nil, false, &DecodeError{What: kind + " " + namespace + "/" + name, Err: err}
		}
		m, ok := v.(map[string]any)
		if !ok && v != nil {
			return nil, false, &DecodeError{What: kind + " " + namespace + "/" + name, Err: errors.New("not a JSON object")}
		}
		return m, true, nil
	case abi.CacheNotFound:
		return nil, false, nil
	}
	return nil, false, &CacheError{Status: status, Message: string(out)}
}

// List reads the objects of a kind from the host's cache, in namespace (""
// for all) and matching labelSelector ("" for all, else kubectl syntax such
// as "app=web,tier!=db"). The kind must be declared in the manifest.
func List(apiVersion, kind, namespace, labelSelector string) ([]Object, error) {
	status, out := cacheRead(abi.CacheRequest{Op: "list", APIVersion: apiVersion, Kind: kind, Namespace: namespace, LabelSelector: labelSelector})
	if status != abi.CacheOK {
		return nil, &CacheError{Status: status, Message: string(out)}
	}
	v, err := jsontree.Decode(out)
	if err != nil {
		return nil, &DecodeError{What: kind + " list", Err: err}
	}
	if v == nil {
		return nil, nil
	}
	list, ok := v.([]any)
	if !ok {
		return nil, &DecodeError{What: kind + " list", Err: errors.New("not a JSON array")}
	}
	objs := make([]Object, len(list))
	for i, e := range list {
		if objs[i], ok = e.(map[string]any); !ok && e != nil {
			return nil, &DecodeError{What: kind + " list", Err: errors.New("item " + strconv.Itoa(i) + " is not a JSON object")}
		}
	}
	return objs, nil
}

// DecodeError is a cache answer that is not the JSON the ABI promises: a
// host bug, or a host that speaks another version of the ABI.
type DecodeError struct {
	What string // "Widget default/w", "Widget list"
	Err  error
}

func (e *DecodeError) Error() string { return "cache read: decoding " + e.What + ": " + e.Err.Error() }

// Unwrap returns the decoder's error.
func (e *DecodeError) Unwrap() error { return e.Err }
