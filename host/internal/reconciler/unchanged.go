package reconciler

import (
	"encoding/binary"
	"encoding/json"
	"hash/maphash"
	"math"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// An event carries nothing the guest can react to when the object, its
// children and the module are exactly as the guest's last successful call
// left them. The usual case is the event of the host's own status write:
// only metadata.resourceVersion, metadata.managedFields and the status
// changed, and the status is the one that call produced. The guest is a
// deterministic function of its request, so calling it again would answer
// what the host has already applied; the host answers the event without a
// call (Options.Policy.CallUnchanged turns this off). The same holds after a
// terminal guest error, which the guest declares the same input repeats:
// calling it again would fail again and record a second identical Warning.
//
// Precisely, the guest is not called when all of these hold, and is called
// otherwise:
//
//   - the last call of this object succeeded, or returned a terminal guest
//     error (Response.error.terminal), with nothing left to retry: no
//     other error, no failed or untold child, no failed write;
//   - that call wrote no child and pruned none (a write changes the
//     children's resourceVersions, so the next event is compared afresh);
//   - that call read nothing through cache_read (what it read may have
//     changed without an event for this object);
//   - the object is not being deleted;
//   - the module's digest is the same;
//   - the object is the same except metadata.resourceVersion,
//     metadata.managedFields and status: same spec, generation, labels,
//     annotations, finalizers, owner references and every other field;
//   - its status is the one the call applied (or found and left alone),
//     compared by value;
//   - the module's children observed now are the ones observed then, by
//     name and resourceVersion;
//   - the call asked for no requeue, or the requeue is not yet due (an
//     unchanged object answered before it is due is requeued for the rest
//     of the time).
//
// Request.now and Request.attempt are not compared: the first changes
// every second, and the second is 0 after a success and, after a terminal
// error, changes nothing the guest declared it would do differently.
type memo struct {
	digest   string    // the module version that answered
	inputs   uint64    // hashObject: the object without resourceVersion, managedFields and status
	status   uint64    // hashValue of the status the call applied or left
	children uint64    // hash of childrenFingerprint
	due      time.Time // when the requeue the guest asked for is due; zero for none
}

// unchanged reports whether obj, observed with children fingerprint
// children, is as memo m left it, and if so after how long its requeue is
// due (0 for none).
func (m memo) unchanged(digest string, obj *unstructured.Unstructured, children string, now time.Time) (bool, time.Duration) {
	if m.digest != digest || m.children != hashString(children) {
		return false, 0
	}
	var wait time.Duration
	if !m.due.IsZero() {
		if wait = m.due.Sub(now); wait <= 0 {
			return false, 0
		}
	}
	status, _ := obj.Object["status"]
	if hashValue(status) != m.status || hashObject(obj) != m.inputs {
		return false, 0
	}
	return true, wait
}

// seed keys the hashes of this process: they are compared only within it.
var seed = maphash.MakeSeed()

// hashObject hashes obj without metadata.resourceVersion,
// metadata.managedFields and status.
func hashObject(obj *unstructured.Unstructured) uint64 {
	var sum uint64
	for k, v := range obj.Object {
		switch k {
		case "status":
			continue
		case "metadata":
			md, ok := v.(map[string]any)
			if !ok {
				break
			}
			var msum uint64
			for mk, mv := range md {
				if mk == "resourceVersion" || mk == "managedFields" {
					continue
				}
				msum += hashEntry(mk, mv)
			}
			sum += hashEntry(k, uint64Value(msum))
			continue
		}
		sum += hashEntry(k, v)
	}
	return sum
}

// uint64Value is a sub-hash written into an outer one.
type uint64Value uint64

func hashString(s string) uint64 { return maphash.String(seed, s) }

// hashValue hashes an unstructured value by content. A number hashes the
// same whichever of int64, float64 or json.Number holds it, as long as it is
// the same value: the cache holds integers as int64, a decoded response as
// float64.
func hashValue(v any) uint64 {
	var h maphash.Hash
	h.SetSeed(seed)
	writeValue(&h, v)
	return h.Sum64()
}

// hashEntry hashes one key and value of a map. The entries of a map are
// summed, so the order of iteration does not matter.
func hashEntry(k string, v any) uint64 {
	var h maphash.Hash
	h.SetSeed(seed)
	h.WriteString(k)
	h.WriteByte(0)
	writeValue(&h, v)
	return h.Sum64()
}

func writeValue(h *maphash.Hash, v any) {
	var b [9]byte
	number := func(f float64) {
		if f == math.Trunc(f) && math.Abs(f) < 1<<63 {
			b[0] = 'i'
			binary.LittleEndian.PutUint64(b[1:], uint64(int64(f)))
		} else {
			b[0] = 'f'
			binary.LittleEndian.PutUint64(b[1:], math.Float64bits(f))
		}
		h.Write(b[:])
	}
	switch x := v.(type) {
	case nil:
		h.WriteByte('n')
	case bool:
		if x {
			h.WriteByte('t')
		} else {
			h.WriteByte('F')
		}
	case string:
		b[0] = 's'
		binary.LittleEndian.PutUint64(b[1:], uint64(len(x)))
		h.Write(b[:])
		h.WriteString(x)
	case int64:
		b[0] = 'i'
		binary.LittleEndian.PutUint64(b[1:], uint64(x))
		h.Write(b[:])
	case int:
		writeValue(h, int64(x))
	case int32:
		writeValue(h, int64(x))
	case float64:
		number(x)
	case json.Number:
		if i, err := x.Int64(); err == nil {
			writeValue(h, i)
		} else if f, err := x.Float64(); err == nil {
			number(f)
		} else {
			writeValue(h, string(x))
		}
	case uint64Value:
		b[0] = 'h'
		binary.LittleEndian.PutUint64(b[1:], uint64(x))
		h.Write(b[:])
	case map[string]any:
		var sum uint64
		for k, e := range x {
			sum += hashEntry(k, e)
		}
		b[0] = 'm'
		binary.LittleEndian.PutUint64(b[1:], sum)
		h.Write(b[:])
		binary.LittleEndian.PutUint64(b[1:], uint64(len(x)))
		h.Write(b[1:])
	case []any:
		b[0] = 'a'
		binary.LittleEndian.PutUint64(b[1:], uint64(len(x)))
		h.Write(b[:])
		for _, e := range x {
			writeValue(h, e)
		}
	default:
		// Not a type the cache or a JSON decoder produces: hash its JSON,
		// which is never equal to another kind's.
		raw, err := json.Marshal(x)
		if err != nil {
			h.WriteByte('?')
			return
		}
		h.WriteByte('j')
		h.Write(raw)
	}
}
