package policy_test

import (
	"reflect"
	"testing"
	"time"

	"github.com/wasmreconcile/wasmreconcile/host/engine"
	"github.com/wasmreconcile/wasmreconcile/host/policy"
	"github.com/wasmreconcile/wasmreconcile/host/protocol"
)

// setEvery sets every field of the struct v points to, recursively, to a
// non-zero value derived from seed, so that a field a merge forgets shows.
func setEvery(t *testing.T, v reflect.Value, seed int) {
	t.Helper()
	for i := 0; i < v.NumField(); i++ {
		f := v.Field(i)
		switch f.Kind() {
		case reflect.Struct:
			setEvery(t, f, seed+i)
		case reflect.Int, reflect.Int64:
			f.SetInt(int64(seed + i + 1))
		case reflect.Uint32, reflect.Uint64:
			f.SetUint(uint64(seed + i + 1))
		case reflect.Float64:
			f.SetFloat(float64(seed+i) + 0.5)
		case reflect.Bool:
			f.SetBool(true)
		case reflect.Slice:
			f.Set(reflect.ValueOf([]string{"ns-" + v.Type().Field(i).Name}))
		default:
			t.Fatalf("field %s of %s: kind %s the test does not set; teach it, and Merge", v.Type().Field(i).Name, v.Type(), f.Kind())
		}
	}
}

// TestMergeTakesEveryFieldSet: every field a layer sets wins, however deep
// (a field added to Policy, engine.Limits or protocol.Limits that Merge
// forgets fails here), and a layer that sets nothing changes nothing.
func TestMergeTakesEveryFieldSet(t *testing.T) {
	var base, over policy.Policy
	setEvery(t, reflect.ValueOf(&base).Elem(), 100)
	setEvery(t, reflect.ValueOf(&over).Elem(), 1)
	if got := base.Merge(over); !reflect.DeepEqual(got, over) {
		t.Errorf("Merge(every field set):\n got %+v\nwant %+v", got, over)
	}
	if got := base.Merge(policy.Policy{}); !reflect.DeepEqual(got, base) {
		t.Errorf("Merge(nothing set) changed the policy:\n got %+v\nwant %+v", got, base)
	}
	if got := (policy.Policy{}).Merge(policy.Policy{}); !reflect.DeepEqual(got, policy.Policy{}) {
		t.Errorf("Merge of two empty policies filled %+v; defaults are WithDefaults' job", got)
	}
}

// TestMergeLayers: flags, then the operator's options, then the module's
// own: each layer overrides only what it sets.
func TestMergeLayers(t *testing.T) {
	flags := policy.Policy{Limits: engine.Limits{Fuel: 1000, Timeout: time.Second}, Storm: policy.Storm{Threshold: 5}, ReadNamespaces: []string{"shared"}}
	options := policy.Policy{Limits: engine.Limits{Timeout: 2 * time.Second}, RateLimit: policy.RateLimit{QPS: 3}}
	module := policy.Policy{Limits: engine.Limits{MemoryLimitPages: 64}, ReadNamespaces: []string{}, Storm: policy.Storm{Disabled: true}}
	got := flags.Merge(options).Merge(module)
	want := policy.Policy{
		Limits:         engine.Limits{Fuel: 1000, Timeout: 2 * time.Second, MemoryLimitPages: 64},
		Storm:          policy.Storm{Threshold: 5, Disabled: true},
		RateLimit:      policy.RateLimit{QPS: 3},
		ReadNamespaces: []string{}, // set to none by the module
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("layers merged:\n got %+v\nwant %+v", got, want)
	}
	// Merge copies: changing a layer later changes no merged policy.
	module.ReadNamespaces = append(module.ReadNamespaces, "later")
	if len(got.ReadNamespaces) != 0 {
		t.Errorf("the merged policy shares the module's ReadNamespaces: %v", got.ReadNamespaces)
	}
}

// TestWithDefaults: every zero field takes its documented default, set
// fields stay, and Limits is left to the manifest and the engine.
func TestWithDefaults(t *testing.T) {
	got := policy.Policy{Storm: policy.Storm{Window: time.Minute}, Limits: engine.Limits{MaxInstances: 7}}.WithDefaults()
	want := policy.Policy{
		Limits:                  engine.Limits{MaxInstances: 7},
		Storm:                   policy.Storm{Threshold: policy.DefaultStormThreshold, Window: time.Minute, Backoff: policy.DefaultStormBackoff},
		Events:                  policy.Events{ObjectQPS: policy.DefaultEventObjectQPS, ObjectBurst: policy.DefaultEventObjectBurst, ModuleQPS: policy.DefaultEventModuleQPS, ModuleBurst: policy.DefaultEventModuleBurst},
		Response:                protocol.Limits{}.WithDefaults(),
		RateLimit:               policy.RateLimit{BaseDelay: policy.DefaultRetryBaseDelay, MaxDelay: policy.DefaultRetryMaxDelay, QPS: policy.DefaultQueueQPS, Burst: policy.DefaultQueueBurst},
		MaxConcurrentReconciles: 0, // the loaded module's instances: the controller reads them
		TriggerMaxFanOut:        policy.DefaultTriggerMaxFanOut,
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("WithDefaults:\n got %+v\nwant %+v", got, want)
	}
	if again := got.WithDefaults(); !reflect.DeepEqual(again, got) {
		t.Errorf("WithDefaults twice differs from once:\n got %+v\nwant %+v", again, got)
	}
	if p := (policy.Policy{MaxConcurrentReconciles: 2, Limits: engine.Limits{MaxInstances: 7}}).WithDefaults(); p.MaxConcurrentReconciles != 2 {
		t.Errorf("a set MaxConcurrentReconciles became %d", p.MaxConcurrentReconciles)
	}
	if p := (policy.Policy{Storm: policy.Storm{Threshold: -3}}).WithDefaults(); p.Storm.Threshold != policy.DefaultStormThreshold {
		t.Errorf("a negative Threshold became %d, want the default", p.Storm.Threshold)
	}
}
