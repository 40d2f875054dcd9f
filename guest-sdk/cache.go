package guest

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/wasmreconcile/wasmreconcile/guest-sdk/abi"
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
	return fmt.Sprintf("cache read: %s (status %d)", e.Message, e.Status)
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
		if err := json.Unmarshal(out, &obj); err != nil {
			return nil, false, fmt.Errorf("cache read: decoding %s %s/%s: %w", kind, namespace, name, err)
		}
		return obj, true, nil
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
	var objs []Object
	if err := json.Unmarshal(out, &objs); err != nil {
		return nil, fmt.Errorf("cache read: decoding %s list: %w", kind, err)
	}
	return objs, nil
}
